package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// freshPostgres creates a database of its own on the test PostgreSQL.
func freshPostgres(t testing.TB) string {
	t.Helper()
	return pgtest.FreshDatabase(t, "throttle_e2e")
}

func doJSON(t *testing.T, method, url, key, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// TestEndToEnd builds the binary, runs it as a user would (embedded default,
// then Redis + PostgreSQL), and drives REST and gRPC.
func TestEndToEnd(t *testing.T) {
	descDir := t.TempDir()
	data, _ := os.ReadFile("testdata/edge.yaml")
	os.WriteFile(filepath.Join(descDir, "edge.yaml"), data, 0o644)

	setups := map[string][]string{
		"embedded":       {"DESCRIPTORS_DIR=" + descDir},
		"redis+postgres": {"DESCRIPTORS_DIR=" + descDir, "REDIS_URL=" + redistest.SharedURL(t), "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"},
	}
	for name, env := range setups {
		t.Run(name, func(t *testing.T) {
			s := throttletest.Start(t, env...)

			code, _, reg := doJSON(t, "POST", s.URL+"/register", "", `{"name":"e2e app","email":"e2e-`+name+`@example.com"}`)
			if code != 201 {
				t.Fatalf("register: %d %v", code, reg)
			}
			key, _ := reg["api_key"].(string)
			if !strings.HasPrefix(key, "thr_") {
				t.Fatalf("api_key = %q", key)
			}
			id := "user-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			for i, want := range []bool{true, true, false} {
				code, h, body := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"`+id+`","limit":2,"window":3600,"algorithm":"fixed_window"}`)
				if code != 200 || body["allowed"] != want {
					t.Fatalf("check %d: %d %v, want allowed=%v", i, code, body, want)
				}
				if !want && h.Get("Retry-After") == "" {
					t.Errorf("check %d: rejected without Retry-After", i)
				}
			}
			if code, _, _ := doJSON(t, "POST", s.URL+"/check", "thr_wrong", `{"identifier":"x","limit":1,"window":1}`); code != 401 {
				t.Errorf("wrong key: %d, want 401", code)
			}

			conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("gRPC health: %v %v", h, err)
			}
			rls := rlsv3.NewRateLimitServiceClient(conn)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
				{Key: "generic_key", Value: "api"}, {Key: "user_id", Value: id}}}}}
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				resp, err := rls.ShouldRateLimit(ctx, req)
				if err != nil || resp.GetOverallCode() != want {
					t.Fatalf("ShouldRateLimit %d: %v %v, want %v", i, resp, err, want)
				}
			}

			// Metrics are served and name the decisions just made.
			resp, err := http.Get(s.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			var metrics bytes.Buffer
			metrics.ReadFrom(resp.Body)
			resp.Body.Close()
			for _, m := range []string{"throttle_ratelimit_over_limit_total", "throttle_http_requests_total", "throttle_db_open_connections", "throttle_descriptors_config_valid"} {
				if !strings.Contains(metrics.String(), m) {
					t.Errorf("/metrics lacks %s", m)
				}
			}

			// The YAML's domain is the operator's: no registration takes it,
			// and a client has no domain unless the operator grants one.
			code, _, reg = doJSON(t, "POST", s.URL+"/register", "", `{"name":"edge ops","email":"edge-`+name+`@example.com","domain":"edge"}`)
			if code != 409 || reg["code"] != "DOMAIN_RESERVED" {
				t.Errorf("register edge: %d %v, want 409 DOMAIN_RESERVED", code, reg)
			}
			if code, _, desc := doJSON(t, "GET", s.URL+"/descriptors", key, ""); code != 200 || desc["yaml"] != false || desc["domain"] != "" {
				t.Errorf("GET /descriptors as e2e-app = %d %v; want no domain", code, desc)
			}

			// SIGTERM: drains and exits 0.
			s.Stop(t, 20*time.Second)
		})
	}
}

// TestRestartKeepsData: clients and rules survive a restart on SQLite.
func TestRestartKeepsData(t *testing.T) {
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "keep.db")
	s := throttletest.Start(t, "DATABASE_URL="+dbURL)
	_, _, reg := doJSON(t, "POST", s.URL+"/register", "", `{"name":"keeper","email":"keep@example.com"}`)
	key, _ := reg["api_key"].(string)
	if code, _, body := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"api_default","algorithm":"fixed_window","limit":5,"window":60}`); code != 201 {
		t.Fatalf("create rule: %d %v", code, body)
	}
	s.Stop(t, 20*time.Second)

	s = throttletest.Start(t, "DATABASE_URL="+dbURL)
	code, _, body := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"u","rule":"api_default"}`)
	if code != 200 || body["allowed"] != true || body["remaining"] != float64(4) {
		t.Fatalf("check with the rule after restart: %d %v", code, body)
	}
}

// TestDebugAddress: DEBUG_ADDRESS serves Go's profiler, and nothing does
// without it.
func TestDebugAddress(t *testing.T) {
	port := testkit.FreePort(t)
	s := throttletest.Start(t, "DEBUG_ADDRESS=127.0.0.1:"+strconv.Itoa(port))
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body.String(), "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d %.200s", resp.StatusCode, body.String())
	}
	// Not on the REST port.
	if resp, err := http.Get(s.URL + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("REST port /debug/pprof/: %v %v, want 404", resp.StatusCode, err)
	}
}
