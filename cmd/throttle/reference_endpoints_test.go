package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/configmap"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// pathConfig is the ConfigMap of Istio's rate-limit sample (the comment of
// samples/ratelimit/rate-limit-service.yaml), with the limit of "/" given.
func pathConfig(perMinute int) map[string]string {
	return map[string]string{"config.yaml": `domain: echo-ratelimit
descriptors:
  - key: PATH
    value: "/"
    rate_limit:
      unit: minute
      requests_per_unit: ` + strconv.Itoa(perMinute) + `
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
`}
}

// pathRequest is Envoy's request for the path p in the sample's domain.
func pathRequest(p string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "echo-ratelimit", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "PATH", Value: p}}}}}
}

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	code, _, body := testkit.GetText(t, url)
	return code, body
}

// rlsDial dials target (host:port or unix:PATH) with the generated Envoy client.
func rlsDial(t *testing.T, target string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// overallCodes sends req n times and returns the overall codes.
func overallCodes(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, n int) []rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []rlsv3.RateLimitResponse_Code
	for range n {
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		out = append(out, resp.GetOverallCode())
	}
	return out
}

// TestReferenceEndpoints: started as the reference, Throttle serves its
// endpoints: /healthcheck (500 until a configuration loads with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED and FORCE_START), the config
// folder of RUNTIME_*, POST /json (200, 429, 400), the debug port's index,
// /rlconfig and /stats, the LIMIT_* headers, gRPC on GRPC_UDS, and it names
// the ignored settings in its log.
func TestReferenceEndpoints(t *testing.T) {
	root := t.TempDir()
	port, debugPort := testkit.FreePort(t), testkit.FreePort(t)
	sock := filepath.Join(t.TempDir(), "rls.sock")
	s := throttletest.StartReference(t,
		"PORT="+strconv.Itoa(port), "GRPC_PORT="+strconv.Itoa(testkit.FreePort(t)), "HOST=127.0.0.1",
		"GRPC_UDS="+sock, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "DESCRIPTORS_RELOAD_INTERVAL=100ms",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left",
		"LOG_FORMAT=text", "LOG_LEVEL=WARN", "QUOTA_MODE=true", "MEMCACHE_HOST_PORT=memcached:11211",
	)
	if code, body := get(t, s.URL+"/healthcheck"); code != 500 || !strings.Contains(body, "no rate limit configuration loaded") {
		t.Errorf("/healthcheck before any configuration = %d %q, want 500", code, body)
	}
	configmap.Write(t, filepath.Join(root, "ratelimit", "config"), pathConfig(2))
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := get(t, s.URL+"/healthcheck"); code != 200; code, _ = get(t, s.URL+"/healthcheck") {
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck did not turn 200 within 10s of the configuration")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get(t, s.URL+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q, want 200 OK", code, body)
	}

	// gRPC on the unix socket; the reference's headers of the closest limit.
	c := rlsDial(t, "unix:"+sock)
	resp, err := c.ShouldRateLimit(context.Background(), pathRequest("/"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first / = %v %v", resp, err)
	}
	headers := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	if headers["RateLimit-Limit"] != "2" || headers["X-Left"] != "1" || headers["RateLimit-Reset"] == "" {
		t.Errorf("headers = %v, want RateLimit-Limit 2, X-Left 1, RateLimit-Reset", headers)
	}

	// POST /json: the second "/" passes, the third is 429.
	post := func(body string) (int, string) {
		t.Helper()
		r, err := http.Post(s.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	req := `{"domain": "echo-ratelimit", "descriptors": [{"entries": [{"key": "PATH", "value": "/"}]}]}`
	if code, body := post(req); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("POST /json, second = %d %s", code, body)
	}
	if code, body := post(req); code != 429 || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) || !strings.Contains(body, `"requestsPerUnit":2`) {
		t.Errorf("POST /json, third = %d %s, want 429 OVER_LIMIT", code, body)
	}
	if code, _ := post(`{"domain": 3}`); code != 400 {
		t.Errorf("POST /json with a bad body = %d, want 400", code)
	}
	if code, _ := post(`{"domain": "echo-ratelimit"}`); code != 400 {
		t.Errorf("POST /json without descriptors = %d, want 400", code)
	}

	// The debug port.
	debug := "http://127.0.0.1:" + strconv.Itoa(debugPort)
	if code, body := get(t, debug+"/"); code != 200 || !strings.Contains(body, "/rlconfig: print out the currently loaded configuration") {
		t.Errorf("debug index = %d %q", code, body)
	}
	if code, body := get(t, debug+"/rlconfig"); code != 200 || !strings.Contains(body, "echo-ratelimit.PATH_/: unit=MINUTE requests_per_unit=2") {
		t.Errorf("debug /rlconfig = %d %q", code, body)
	}
	if code, body := get(t, debug+"/stats"); code != 200 || !strings.Contains(body, `throttle_ratelimit_over_limit_total{domain="echo-ratelimit",key="PATH_/"} 1`) {
		t.Errorf("debug /stats = %d, lacks the over-limit count:\n%.2000s", code, body)
	}

	// The ignored settings, named once.
	logs := s.Logs.String()
	if n := strings.Count(logs, "have no meaning in Throttle"); n != 1 || !strings.Contains(logs, "QUOTA_MODE") || !strings.Contains(logs, "MEMCACHE_HOST_PORT") {
		t.Errorf("the log names the ignored settings %d times, want once with QUOTA_MODE and MEMCACHE_HOST_PORT:\n%s", n, logs)
	}
	if !strings.Contains(logs, "level=") {
		t.Errorf("LOG_FORMAT=text: the log is not text:\n%s", logs)
	}
}

// TestReferenceRefusals: settings Throttle cannot honour stop it at start
// with a sentence naming them.
func TestReferenceRefusals(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=memcached:11211"}, "BACKEND_TYPE: memcache: Throttle has no memcached backend"},
		{[]string{"DESCRIPTORS_DIR=/tmp", "RUNTIME_ROOT=/data"}, "DESCRIPTORS_DIR and RUNTIME_ROOT/RUNTIME_SUBDIRECTORY are both set"},
		{[]string{"DEBUG_ADDRESS=127.0.0.1:6070", "DEBUG_PORT=6071"}, "DEBUG_ADDRESS and DEBUG_HOST/DEBUG_PORT are both set"},
		{[]string{"LOG_FORMAT=xml"}, `LOG_FORMAT: "xml" is not json or text`},
	} {
		cmd := throttletest.Command(t)
		cmd.Args = []string{"ratelimit"}
		link := filepath.Join(t.TempDir(), "ratelimit")
		if out, err := exec.Command("ln", "-s", cmd.Path, link).CombinedOutput(); err != nil {
			t.Fatalf("ln: %v %s", err, out)
		}
		cmd.Path = link
		cmd.Env = append(cmd.Env, tt.env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err == nil || !strings.Contains(out.String(), tt.want) {
			t.Errorf("%v: %v, output %q; want a refusal saying %q", tt.env, err, out.String(), tt.want)
		}
	}
}
