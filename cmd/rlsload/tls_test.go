package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// tlsBench is a server with mTLS on its gRPC port and the client files
// rlsload presents to it.
type tlsBench struct {
	server                certtest.Files
	clientCert, clientKey string
}

func newTLSBench(t testing.TB) tlsBench {
	t.Helper()
	ca := certtest.NewCA(t, "bench CA")
	dir := t.TempDir()
	client := ca.Issue(t, certtest.Leaf{URIs: []string{"spiffe://bench/envoy"}}).Write(t, filepath.Join(dir, "client"), ca)
	return tlsBench{server: ca.Localhost(t).Write(t, filepath.Join(dir, "server"), ca), clientCert: client.Cert, clientKey: client.Key}
}

func (b tlsBench) env() []string {
	return []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + b.server.Cert, "GRPC_SERVER_TLS_KEY=" + b.server.Key,
		"GRPC_CLIENT_TLS_CACERT=" + b.server.CA, "GRPC_CLIENT_TLS_SAN=spiffe://bench/envoy"}
}

func (b tlsBench) args() []string {
	return []string{"-tls-ca", b.server.CA, "-tls-cert", b.clientCert, "-tls-key", b.clientKey}
}

// benchDir is a descriptors folder with -print-config's descriptors.
func benchDir(t testing.TB) string {
	t.Helper()
	var cfg bytes.Buffer
	if err := run(context.Background(), []string{"-print-config"}, &cfg, &cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), cfg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOverMutualTLS: with -tls-ca, -tls-cert and -tls-key the calls go
// over mTLS and are decided; without the client certificate the server
// refuses every one.
func TestOverMutualTLS(t *testing.T) {
	b := newTLSBench(t)
	s := throttletest.Start(t, append(b.env(), "REDIS_URL="+redistest.SharedURL(t), "DESCRIPTORS_DIR="+benchDir(t))...)
	got := load(t, slices.Concat([]string{"-addr", s.GRPCAddr, "-case", "hot", "-requests", "300", "-warmup", "0", "-concurrency", "8"}, b.args())...)
	for k, v := range map[string]string{"calls": "300", "ok": strconv.Itoa(hotLimit), "over": strconv.Itoa(300 - hotLimit), "errors": "0", "tls": "mtls"} {
		if got[k] != v {
			t.Errorf("%s = %s, want %s", k, got[k], v)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-addr", s.GRPCAddr, "-requests", "5", "-warmup", "0", "-tls-ca", b.server.CA}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if got := resultFields(t, out.String()); got["errors"] != "5" || !strings.HasPrefix(got["error_codes"], "Unavailable:") {
		t.Errorf("without a client certificate: errors %s (%s), want 5 Unavailable\n%s", got["errors"], got["error_codes"], out.String())
	}
	for _, args := range [][]string{{"-tls-cert", b.clientCert}, {"-tls-cert", b.clientCert, "-tls-key", b.clientKey}} {
		if err := run(context.Background(), append([]string{"-addr", s.GRPCAddr}, args...), &out, &out); err == nil {
			t.Errorf("rlsload %v: no error", args)
		}
	}
}

// BenchmarkTLSCost measures what TLS costs Throttle: the service's CPU per
// call (from /proc) with mTLS on the gRPC port and without, one replica of
// the built binary each on a throw-away Redis, driven by this load
// generator at 64 calls in flight over long-lived connections (2, as
// Envoy's workers, and 64), distinct descriptors. The runs alternate off,
// on, off, on… (-benchtime Nx: N rounds, after the one round Go's first
// probe of a benchmark makes); each run is printed, and the medians of the
// N rounds and on/off reported. Run: make bench-tls.
func BenchmarkTLSCost(b *testing.B) {
	rds := redistest.Start(b)
	dir := benchDir(b)
	tb := newTLSBench(b)
	servers := map[string]*throttletest.Server{
		"off": throttletest.Start(b, "REDIS_URL="+rds.URL(), "DESCRIPTORS_DIR="+dir),
		"on":  throttletest.Start(b, append(tb.env(), "REDIS_URL="+rds.URL(), "DESCRIPTORS_DIR="+dir)...),
	}
	requests := 30000
	if v := os.Getenv("BENCH_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_REQUESTS=%q: not a positive number", v)
		}
		requests = n
	}
	for _, conns := range []int{2, 64} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			cpu := map[string][]float64{}
			for round := 0; round < b.N; round++ {
				for _, mode := range []string{"off", "on"} {
					s := servers[mode]
					args := []string{"-addr", s.GRPCAddr, "-pid", strconv.Itoa(s.PID()), "-case", "distinct", "-concurrency", "64",
						"-conns", strconv.Itoa(conns), "-requests", strconv.Itoa(requests), "-duration", "60s", "-warmup", "2000"}
					if mode == "on" {
						args = append(args, tb.args()...)
					}
					var out bytes.Buffer
					if err := run(context.Background(), args, &out, &out); err != nil {
						b.Fatalf("rlsload: %v\n%s", err, out.String())
					}
					got := resultFields(b, out.String())
					if got["errors"] != "0" {
						b.Fatalf("%s: %s errors (%s)", mode, got["errors"], got["error_codes"])
					}
					f, err := strconv.ParseFloat(got["cpu_us_per_req"], 64)
					if err != nil {
						b.Fatalf("cpu_us_per_req = %q", got["cpu_us_per_req"])
					}
					cpu[mode] = append(cpu[mode], f)
					// Every run, whole (b.Log would cut the lines after ten).
					fmt.Printf("conns=%d round %d/%d tls=%s: %s µs/call, %s calls/s, p99 %s µs\n", conns, round+1, b.N, mode, got["cpu_us_per_req"], got["rps"], got["p99_us"])
				}
			}
			off, on := median(cpu["off"]), median(cpu["on"])
			b.ReportMetric(off, "off-µs/call")
			b.ReportMetric(on, "mtls-µs/call")
			b.ReportMetric(on/off, "on/off")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
