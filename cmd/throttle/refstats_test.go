package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// statsDescriptors is the descriptor configuration of the reference stats'
// tests: api 5 a day (7 calls: 4 within, 1 near, 2 over), a detailed
// remote_address, and a key of two levels.
const statsDescriptors = `domain: edge
descriptors:
  - key: generic_key
    value: api
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 100}
`

// startForStats runs the binary as the reference is run, with the
// descriptors above in DESCRIPTORS_DIR (returned), a Redis of its own, and
// env, and returns it.
func startForStats(t *testing.T, env ...string) (*throttletest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(statsDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)
	base := []string{
		"PORT=" + strconv.Itoa(testkit.FreePort(t)), "GRPC_PORT=" + strconv.Itoa(testkit.FreePort(t)),
		"REDIS_URL=" + redis.URL(), "DESCRIPTORS_DIR=" + dir, "DESCRIPTORS_RELOAD_INTERVAL=100ms", "LOG_LEVEL=warn",
	}
	return throttletest.StartReference(t, append(base, env...)...), dir
}

// sendStatsCalls makes the calls the tests count: generic_key=api 7 times
// (5 a day: 4 within, the 5th near, 2 over), remote_address=10.0.0.1 once,
// and tenant=t1/user=u1 twice.
func sendStatsCalls(t *testing.T, s *throttletest.Server) {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	call := func(kv ...string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		d := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%q): %v", kv, err)
		}
		return resp.GetOverallCode()
	}
	for i := range 7 {
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := call("generic_key", "api"); got != want {
			t.Fatalf("call %d of generic_key=api: %v, want %v", i+1, got, want)
		}
	}
	call("remote_address", "10.0.0.1")
	call("tenant", "t1", "user", "u1")
	call("tenant", "t1", "user", "u1")
}

// statsLines collects the statsd lines a listener receives, over TCP or
// UDP, for the test's length.
type statsLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *statsLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *statsLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// listenStatsd listens on a loopback port for statsd over protocol and
// returns its port and the lines received.
func listenStatsd(t *testing.T, protocol string) (int, *statsLines) {
	t.Helper()
	got := &statsLines{}
	scan := func(r io.Reader) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				got.add(line)
			}
		}
	}
	if protocol == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				scan(strings.NewReader(string(buf[:n])))
			}
		}()
		return pc.LocalAddr().(*net.UDPAddr).Port, got
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
			go scan(conn)
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, got
}

// counterLine is a statsd counter line, NAME:VALUE|c.
var counterLine = regexp.MustCompile(`^([^:|]+):(\d+)\|c$`)

// sums adds up the counter lines of the names in want (a counter moving
// between two flushes comes in two lines), and fails the test on a line of
// one of them that is not NAME:VALUE|c.
func sums(t *testing.T, lines []string, want map[string]uint64) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	for _, line := range lines {
		name, _, _ := strings.Cut(line, ":")
		if _, ok := want[name]; !ok {
			continue
		}
		m := counterLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %q is not NAME:VALUE|c", line)
			continue
		}
		v, _ := strconv.ParseUint(m[2], 10, 64)
		got[name] += v
	}
	return got
}

// waitFor polls until f holds, for 10 s at most.
func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReferenceStatsStatsd: started as the reference is, with its statsd
// settings, Throttle sends its stats under its names: over TCP, gostats'
// default (Envoy Gateway's managed deployment sends to its statsd-exporter
// sidecar so), and over UDP.
func TestReferenceStatsStatsd(t *testing.T) {
	for _, protocol := range []string{"tcp", "udp"} {
		t.Run(protocol, func(t *testing.T) {
			port, got := listenStatsd(t, protocol)
			env := []string{"USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT=" + strconv.Itoa(port), "STATS_FLUSH_INTERVAL=100ms"}
			if protocol == "udp" {
				env = append(env, "STATSD_PROTOCOL=udp")
			}
			s, dir := startForStats(t, env...)
			sendStatsCalls(t, s)

			const rl = "ratelimit.service.rate_limit.edge."
			want := map[string]uint64{
				rl + "generic_key_api.total_hits": 7, rl + "generic_key_api.within_limit": 5,
				rl + "generic_key_api.near_limit": 1, rl + "generic_key_api.over_limit": 2,
				rl + "remote_address_10_0_0_1.total_hits": 1, rl + "remote_address_10_0_0_1.within_limit": 1,
				rl + "tenant.user.total_hits": 2, rl + "tenant.user.within_limit": 2,
				"ratelimit.service.config_load_success":           1,
				"ratelimit_server.ShouldRateLimit.total_requests": 10,
			}
			waitFor(t, "the stats", func() bool { return cmp.Equal(sums(t, got.all(), want), want) })

			// A bad edit of the configuration: config_load_error. Written
			// whole and renamed into place (as a ConfigMap's update is): a
			// poll between an in-place write's truncation and its bytes
			// would load an empty file, a second error.
			staged := filepath.Join(t.TempDir(), "edge.yaml")
			if err := os.WriteFile(staged, []byte("domain: edge\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(staged, filepath.Join(dir, "edge.yaml")); err != nil {
				t.Fatal(err)
			}
			errWant := map[string]uint64{"ratelimit.service.config_load_error": 1}
			waitFor(t, "config_load_error", func() bool { return cmp.Equal(sums(t, got.all(), errWant), errWant) })
			if !slices.ContainsFunc(got.all(), func(l string) bool {
				return strings.HasPrefix(l, "ratelimit_server.ShouldRateLimit.response_time:") && strings.HasSuffix(l, "|ms")
			}) {
				t.Error("no ratelimit_server.ShouldRateLimit.response_time:N|ms line")
			}
			time.Sleep(300 * time.Millisecond) // three more flushes: nothing counted twice
			want["ratelimit.service.config_load_error"] = 1
			if diff := cmp.Diff(want, sums(t, got.all(), want)); diff != "" {
				t.Errorf("statsd counters (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReferenceStatsFlushedAtShutdown: what was counted since the last
// flush is sent at SIGTERM, after the servers drained.
func TestReferenceStatsFlushedAtShutdown(t *testing.T) {
	port, got := listenStatsd(t, "tcp")
	s, _ := startForStats(t, "USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(port), "STATS_FLUSH_INTERVAL=1h")
	sendStatsCalls(t, s)
	want := map[string]uint64{"ratelimit.service.rate_limit.edge.generic_key_api.total_hits": 7, "ratelimit.service.config_load_success": 1}
	if sent := sums(t, got.all(), want); len(sent) > 0 {
		t.Fatalf("sent before the first flush: %v", sent)
	}
	s.Stop(t, 15*time.Second)
	waitFor(t, "the stats at shutdown", func() bool { return cmp.Equal(sums(t, got.all(), want), want) })
}

// hasSamples reports whether body has every sample of want, line for line.
func hasSamples(body string, want []string) bool {
	lines := strings.Split(body, "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			return false
		}
	}
	return true
}

// TestReferenceStatsPrometheus: USE_PROMETHEUS serves the stats on
// PROMETHEUS_ADDR under the reference's default mapping, or under
// PROMETHEUS_MAPPER_YAML's.
func TestReferenceStatsPrometheus(t *testing.T) {
	mapper := filepath.Join(t.TempDir(), "mapper.yaml")
	if err := os.WriteFile(mapper, []byte(`mappings:
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "rl_over"
    timer_type: histogram
    labels: {ns: "$1", descriptor: "$2"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path string
		env        []string
		want       []string
		log        string // in the server's log
	}{
		{"default mapping", "/metrics", nil, []string{
			`ratelimit_service_rate_limit_total_hits{domain="edge",key1="generic_key_api"} 7`,
			`ratelimit_service_rate_limit_within_limit{domain="edge",key1="generic_key_api"} 5`,
			`ratelimit_service_rate_limit_near_limit{domain="edge",key1="generic_key_api"} 1`,
			`ratelimit_service_rate_limit_over_limit{domain="edge",key1="generic_key_api"} 2`,
			`ratelimit_service_rate_limit_total_hits{domain="edge",key1="remote_address_10_0_0_1"} 1`,
			`ratelimit_service_rate_limit_total_hits{domain="edge",key1="tenant",key2="user"} 2`,
			`ratelimit_service_rate_limit_within_limit{domain="edge",key1="tenant",key2="user"} 2`,
			`ratelimit_service_config_load_success 1`,
			`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 10`,
			`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 10`,
		}, ""},
		{"PROMETHEUS_MAPPER_YAML missing: the default mapping", "/metrics", []string{"PROMETHEUS_MAPPER_YAML=" + mapper + ".missing"}, []string{
			`ratelimit_service_rate_limit_over_limit{domain="edge",key1="generic_key_api"} 2`,
		}, "PROMETHEUS_MAPPER_YAML does not load"},
		{"PROMETHEUS_MAPPER_YAML", "/stats/prometheus", []string{"PROMETHEUS_MAPPER_YAML=" + mapper, "PROMETHEUS_PATH=/stats/prometheus"}, []string{
			`rl_over{descriptor="generic_key_api",ns="edge"} 2`,
			`ratelimit_service_rate_limit_edge_generic_key_api_total_hits 7`,
			`ratelimit_server_ShouldRateLimit_total_requests 10`,
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
			s, _ := startForStats(t, append([]string{"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=" + addr, "STATS_FLUSH_INTERVAL=100ms"}, tt.env...)...)
			sendStatsCalls(t, s)
			url := "http://" + addr + tt.path
			waitFor(t, "the metrics", func() bool { return hasSamples(getOK(t, url), tt.want) })
			if tt.log != "" && !strings.Contains(s.Logs.String(), tt.log) {
				t.Errorf("no %q in the log", tt.log)
			}
			if tt.path != "/metrics" {
				resp, err := http.Get("http://" + addr + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("GET /metrics beside PROMETHEUS_PATH=%s: %d, want 404", tt.path, resp.StatusCode)
				}
			}
			// Throttle's own /metrics is unchanged.
			if body := getOK(t, s.URL+"/metrics"); !strings.Contains(body, `throttle_ratelimit_hits_total{domain="edge",key="generic_key_api"} 7`) ||
				strings.Contains(body, "ratelimit_service_") {
				t.Error("Throttle's /metrics: no throttle_ratelimit_hits_total of 7, or reference stats in it")
			}
		})
	}
}
