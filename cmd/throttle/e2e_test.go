package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/logbuf"

	"github.com/throttle-rl/throttle/internal/pgtest"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/throttle-rl/throttle/internal/redistest"
)

// buildBinary builds cmd/throttle once per test into a temp dir.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "throttle")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freshPostgres creates a database of its own on the test PostgreSQL.
func freshPostgres(t *testing.T) string {
	t.Helper()
	return pgtest.FreshDatabase(t, "throttle_e2e")
}

type server struct {
	cmd      *exec.Cmd
	rest     string
	grpcAddr string
	logs     *logbuf.Buffer
	exited   chan error
}

func startServer(t *testing.T, bin string, env ...string) *server {
	t.Helper()
	port, grpcPort := freePort(t), freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "serve")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), fmt.Sprintf("PORT=%d", port), fmt.Sprintf("GRPC_PORT=%d", grpcPort),
		"BIND_ADDRESS=127.0.0.1"}, env...)
	s := &server{cmd: cmd, rest: fmt.Sprintf("http://127.0.0.1:%d", port), grpcAddr: fmt.Sprintf("127.0.0.1:%d", grpcPort), logs: &logbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server logs:\n%s", s.logs)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(s.rest + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		select {
		case err := <-s.exited:
			t.Fatalf("server exited: %v\n%s", err, s.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not answer /health within 20s\n%s", s.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	bin := buildBinary(t)
	descDir := t.TempDir()
	data, _ := os.ReadFile("testdata/edge.yaml")
	os.WriteFile(filepath.Join(descDir, "edge.yaml"), data, 0o644)

	setups := map[string][]string{
		"embedded":       {"DESCRIPTORS_DIR=" + descDir},
		"redis+postgres": {"DESCRIPTORS_DIR=" + descDir, "REDIS_URL=" + redistest.SharedURL(t), "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"},
	}
	for name, env := range setups {
		t.Run(name, func(t *testing.T) {
			s := startServer(t, bin, env...)

			code, _, reg := doJSON(t, "POST", s.rest+"/register", "", `{"name":"e2e app","email":"e2e-`+name+`@example.com"}`)
			if code != 201 {
				t.Fatalf("register: %d %v", code, reg)
			}
			key, _ := reg["api_key"].(string)
			if !strings.HasPrefix(key, "thr_") {
				t.Fatalf("api_key = %q", key)
			}
			id := "user-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			for i, want := range []bool{true, true, false} {
				code, h, body := doJSON(t, "POST", s.rest+"/check", key, `{"identifier":"`+id+`","limit":2,"window":3600,"algorithm":"fixed_window"}`)
				if code != 200 || body["allowed"] != want {
					t.Fatalf("check %d: %d %v, want allowed=%v", i, code, body, want)
				}
				if !want && h.Get("Retry-After") == "" {
					t.Errorf("check %d: rejected without Retry-After", i)
				}
			}
			if code, _, _ := doJSON(t, "POST", s.rest+"/check", "thr_wrong", `{"identifier":"x","limit":1,"window":1}`); code != 401 {
				t.Errorf("wrong key: %d, want 401", code)
			}

			conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
			resp, err := http.Get(s.rest + "/metrics")
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

			// SIGTERM: drains and exits 0.
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-s.exited:
				if err != nil {
					t.Errorf("exit after SIGTERM: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("server still running 20s after SIGTERM")
			}
		})
	}
}

// TestRestartKeepsData: clients and rules survive a restart on SQLite.
func TestRestartKeepsData(t *testing.T) {
	bin := buildBinary(t)
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "keep.db")
	s := startServer(t, bin, "DATABASE_URL="+dbURL)
	_, _, reg := doJSON(t, "POST", s.rest+"/register", "", `{"name":"keeper","email":"keep@example.com"}`)
	key, _ := reg["api_key"].(string)
	if code, _, body := doJSON(t, "POST", s.rest+"/rules", key, `{"name":"api_default","algorithm":"fixed_window","limit":5,"window":60}`); code != 201 {
		t.Fatalf("create rule: %d %v", code, body)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited

	s = startServer(t, bin, "DATABASE_URL="+dbURL)
	code, _, body := doJSON(t, "POST", s.rest+"/check", key, `{"identifier":"u","rule":"api_default"}`)
	if code != 200 || body["allowed"] != true || body["remaining"] != float64(4) {
		t.Fatalf("check with the rule after restart: %d %v", code, body)
	}
}
