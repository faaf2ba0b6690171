package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
	"github.com/throttle-rl/throttle/internal/testkit/xdstest"
)

// egNode is the node id of the rate-limit service Envoy Gateway deploys.
const egNode = "envoy-ratelimit"

// egConfig is a RateLimitConfig as Envoy Gateway makes one: a domain per
// listener, a descriptor per route rule, n requests per hour.
func egConfig(n uint32, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{
		Name: "default/eg/http", Domain: "default/eg/http",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "httproute/default/backend/rule/0/match/0", Value: "httproute/default/backend/rule/0/match/0",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "x-user-id", RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}},
		}},
	}
}

// rlsClientAt is a rate-limit client of the gRPC port at addr.
func rlsClientAt(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// egRequest is Envoy's request for user on the route of egConfig.
func egRequest(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
		{Key: "httproute/default/backend/rule/0/match/0", Value: "httproute/default/backend/rule/0/match/0"}, {Key: "x-user-id", Value: user},
	}}}}
}

// wantLimit checks that a new user gets n OKs and then OVER_LIMIT.
func wantLimit(t *testing.T, rls rlsv3.RateLimitServiceClient, n int, step string) {
	t.Helper()
	user := step + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := 0; i <= n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rls.ShouldRateLimit(ctx, egRequest(user))
		cancel()
		want := rlsv3.RateLimitResponse_OK
		if i == n {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("%s: request %d: %v, %v; want %v (a limit of %d)", step, i+1, resp.GetOverallCode(), err, want, n)
		}
	}
}

// TestXDSEnvoyGateway runs the binary as Envoy Gateway's managed
// Deployment runs the reference service (its envoy-ratelimit Deployment,
// internal/infrastructure/kubernetes/ratelimit in envoyproxy/gateway):
// /bin/ratelimit with its environment word for word, only the addresses
// moved to the test's (the xDS control plane, an in-test go-control-plane
// ADS server over mTLS; a real Redis as host:port; statsd on a free port;
// the certificates in a temp folder): the config folder settings it sets
// anyway (ignored under xDS, as the reference), TLS on the gRPC port, the
// xDS client's mTLS, statsd to its sidecar's port. Checked with the
// generated Envoy client over TLS: the first snapshot, an update, a bad
// snapshot NACKed with its reason (the last good kept), the control plane
// stopped and back on its address; GET /healthcheck as its probes ask; the
// statsd lines of the decisions, over TCP as gostats sends them.
func TestXDSEnvoyGateway(t *testing.T) {
	ca := certtest.NewCA(t, "envoy-gateway CA")
	files := ca.Issue(t, certtest.Leaf{CommonName: "envoy-ratelimit", DNS: []string{"envoy-ratelimit"}, IPs: []string{"127.0.0.1"}}).Write(t, t.TempDir(), ca)
	srv := xdstest.Start(t, xdstest.Options{TLS: xdstest.MTLS(t, ca)})
	redis := redistest.Start(t)
	statsdPort, statsd := listenStatsd(t, "tcp")
	port, grpcPort := strconv.Itoa(testkit.FreePort(t)), strconv.Itoa(testkit.FreePort(t))
	s := throttletest.StartReference(t,
		"RLCONFIG_ON_REST_PORT=true",
		"RUNTIME_ROOT=/data",
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=true",
		"STATSD_PORT="+strconv.Itoa(statsdPort),
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL="+srv.Addr,
		"CONFIG_GRPC_XDS_NODE_ID="+egNode,
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+files.Cert,
		"GRPC_SERVER_TLS_KEY="+files.Key,
		"GRPC_SERVER_TLS_CA_CERT="+files.CA,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+files.Cert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+files.Key,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+files.CA,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+redis.Addr(),
		"PORT="+port, "GRPC_PORT="+grpcPort,
	)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	rls := rlsv3.NewRateLimitServiceClient(dialGRPC(t, s.GRPCAddr, &tls.Config{RootCAs: pool, ServerName: "envoy-ratelimit"}))
	if code, body := get(t, s.URL+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck (the readiness probe) = %d %q, want 200 OK", code, body)
	}

	// Before the first snapshot: as the reference before any configuration.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := rls.ShouldRateLimit(ctx, egRequest("early"))
	cancel()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("before the first snapshot: %v, want UNAVAILABLE no rate limit configuration loaded", err)
	}

	srv.Set(t, egNode, "1", egConfig(3, rlsconf.RateLimitUnit_HOUR))
	srv.WaitRequest(t, 20*time.Second, "ACK of version 1", xdstest.ACK("1"))
	wantLimit(t, rls, 3, "first snapshot")
	if dump := getOK(t, s.URL+"/rlconfig"); !strings.Contains(dump, "default/eg/http.httproute/default/backend/rule/0/match/0_httproute/default/backend/rule/0/match/0.x-user-id: unit=HOUR requests_per_unit=3") {
		t.Errorf("GET /rlconfig does not show the xDS configuration:\n%s", dump)
	}

	srv.Set(t, egNode, "2", egConfig(5, rlsconf.RateLimitUnit_HOUR))
	srv.WaitRequest(t, 20*time.Second, "ACK of version 2", xdstest.ACK("2"))
	wantLimit(t, rls, 5, "update")

	srv.Set(t, egNode, "3", egConfig(1, rlsconf.RateLimitUnit_UNKNOWN))
	nack := srv.WaitRequest(t, 20*time.Second, "NACK of version 3", xdstest.NACK)
	wantNACK := `RateLimitConfig "default/eg/http": domain "default/eg/http" › descriptors[0] › descriptors[0] › rate_limit: invalid rate limit unit 'UNKNOWN'`
	if got := nack.GetErrorDetail().GetMessage(); got != wantNACK || nack.GetVersionInfo() != "2" {
		t.Errorf("NACK: version %q, error_detail %q; want version 2, %q", nack.GetVersionInfo(), got, wantNACK)
	}
	wantLimit(t, rls, 5, "after the NACK")

	// The control plane restarts (a rollout of Envoy Gateway): the last
	// configuration serves meanwhile; the new one's snapshot is followed
	// once the client has connected again (XDS_CLIENT_BACKOFF_*: 10s ±50%).
	srv.Stop()
	wantLimit(t, rls, 5, "control plane gone")
	srv2 := xdstest.Start(t, xdstest.Options{Addr: srv.Addr, TLS: xdstest.MTLS(t, ca)})
	srv2.Set(t, egNode, "4", egConfig(2, rlsconf.RateLimitUnit_HOUR))
	srv2.WaitRequest(t, 40*time.Second, "ACK of version 4 after the restart", xdstest.ACK("4"))
	wantLimit(t, rls, 2, "after the restart")

	// The stats, flushed every STATS_FLUSH_INTERVAL (10s, Envoy Gateway
	// sets none): 5 users of 3, 5, 5, 5 and 2 OKs and one over each (20
	// within, 5 over, 25 hits; the early call, before any configuration,
	// is none), and the configurations: 3 snapshots loaded, 1 NACKed.
	key := "ratelimit.service.rate_limit.default/eg/http.httproute/default/backend/rule/0/match/0_httproute/default/backend/rule/0/match/0.x-user-id"
	want := map[string]uint64{
		key + ".total_hits": 25, key + ".over_limit": 5, key + ".within_limit": 20,
		"ratelimit.service.config_load_success": 3, "ratelimit.service.config_load_error": 1,
	}
	deadline := time.Now().Add(30 * time.Second)
	for got := sums(t, statsd.all(), want); !maps.Equal(got, want); got = sums(t, statsd.all(), want) {
		if time.Now().After(deadline) {
			t.Errorf("statsd counters = %v, want %v", got, want)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if rdb := redistest.NewClient(t, redis.URL()); rdb.DBSize(context.Background()).Val() == 0 {
		t.Error("nothing counted in REDIS_URL's Redis")
	}

	logs := s.Logs.String()
	for line, n := range map[string]int{
		"xDS rate-limit configuration loaded": 3, "configuration refused (NACK)": 1, "xDS stream ended": 1, "reached again": 1,
	} {
		if got := strings.Count(logs, line); got != n {
			t.Errorf("%d log lines with %q, want %d", got, line, n)
		}
	}
}

// TestXDSWaitsAndOverlays: without FORCE_START_WITHOUT_INITIAL_CONFIG,
// serving waits for the control plane's first snapshot; a domain it
// describes then wins over the descriptor files' same domain, the files'
// other domains still apply, and GET /rlconfig shows both.
func TestXDSWaitsAndOverlays(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"eg.yaml":   "domain: default/eg/http\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
		"edge.yaml": "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
	})
	srv := xdstest.Start(t, xdstest.Options{})
	port, grpcPort := testkit.FreePort(t), testkit.FreePort(t)
	cmd := throttletest.Command(t, "serve")
	cmd.Env = append(cmd.Env, "PORT="+strconv.Itoa(port), "GRPC_PORT="+strconv.Itoa(grpcPort), "BIND_ADDRESS=127.0.0.1", "LOG_LEVEL=info", "RLCONFIG_ON_REST_PORT=true",
		"DESCRIPTORS_DIR="+dir, "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+srv.Addr, "CONFIG_GRPC_XDS_NODE_ID="+egNode)
	var logs logbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("throttle output:\n%s", logs.String())
		}
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	waitLog(t, &logs, "waiting for the first xDS configuration before serving")
	time.Sleep(300 * time.Millisecond)
	if resp, err := http.Get(base + "/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("GET /health answered %d before the first xDS snapshot", resp.StatusCode)
	}

	srv.Set(t, egNode, "1", egConfig(3, rlsconf.RateLimitUnit_HOUR))
	waitHealth(t, base)
	rls := rlsClientAt(t, "127.0.0.1:"+strconv.Itoa(grpcPort))
	wantLimit(t, rls, 3, "the xDS domain")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	edge := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{rlsDesc("path", "/")}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if resp, err := rls.ShouldRateLimit(ctx, edge); err != nil || resp.GetOverallCode() != want {
			t.Fatalf("edge (the files' domain) request %d: %v, %v; want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	dump := getOK(t, base+"/rlconfig")
	for _, line := range []string{"edge.path: unit=HOUR requests_per_unit=1", "x-user-id: unit=HOUR requests_per_unit=3"} {
		if !strings.Contains(dump, line) {
			t.Errorf("GET /rlconfig has no %q:\n%s", line, dump)
		}
	}
	if strings.Contains(dump, "remote_address") {
		t.Errorf("GET /rlconfig shows the files' default/eg/http, which the xDS one replaces:\n%s", dump)
	}
	if n := strings.Count(logs.String(), `"domains":["default/eg/http"]`); n != 1 {
		t.Errorf("%d warnings naming the replaced domain, want 1:\n%s", n, logs.String())
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// getOK returns the body of GET url, failing the test unless it is 200.
func getOK(t *testing.T, url string) string {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	return body
}

// waitLog waits up to 20s for logs to hold s.
func waitLog(t *testing.T, logs *logbuf.Buffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in 20s", s)
		}
	}
}

// waitHealth waits up to 20s for GET /health to answer 200.
func waitHealth(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /health did not answer 200 in 20s")
		}
	}
}
