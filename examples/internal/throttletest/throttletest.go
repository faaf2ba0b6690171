// Package throttletest runs a real Throttle server for the examples' tests:
// the binary built from ./cmd/throttle, on free loopback ports, with counters in
// memory and a SQLite database in a temporary directory.
package throttletest

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/logbuf"
)

// Server is a running Throttle.
type Server struct {
	// URL is the REST API's base URL, such as "http://127.0.0.1:41234".
	URL string
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string
}

// settings are Throttle's environment variables; the test's own environment
// must not leak into the server (make test exports some for other tests).
var settings = []string{
	"PORT", "GRPC_PORT", "REDIS_URL", "DATABASE_URL", "DESCRIPTORS_DIR",
	"FAILURE_MODE", "TRUSTED_PROXIES", "LOG_LEVEL", "RATE_LIMIT_RESPONSE_HEADERS",
	// The rest of what `throttle serve --help` lists.
	"BIND_ADDRESS", "MERGE_DOMAIN_CONFIG", "DESCRIPTORS_RELOAD_INTERVAL", "BACKEND_TIMEOUT",
	"CACHE_REFRESH_INTERVAL", "REGISTER_LIMIT_PER_HOUR", "SHUTDOWN_TIMEOUT",
}

// Start builds Throttle and starts it with the extra settings env
// ("NAME=value"); the server is stopped when the test ends.
func Start(t *testing.T, env ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "throttle")
	build := exec.Command("go", "build", "-o", bin, "./cmd/throttle")
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/throttle: %v\n%s", err, out)
	}

	httpPort, grpcPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "serve")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(),
		"PORT="+strconv.Itoa(httpPort),
		"GRPC_PORT="+strconv.Itoa(grpcPort),
		"DATABASE_URL=sqlite://"+filepath.Join(dir, "t.db"),
		"LOG_LEVEL=warn",
	)
	cmd.Env = append(cmd.Env, env...)
	var logs logbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start throttle: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("throttle output:\n%s", logs.String())
		}
	})

	s := &Server{
		URL:      "http://127.0.0.1:" + strconv.Itoa(httpPort),
		GRPCAddr: "127.0.0.1:" + strconv.Itoa(grpcPort),
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("throttle exited before answering /health: %v\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get(s.URL + "/health")
		if err == nil {
			var body struct{ Status string }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && body.Status == "ok" {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("throttle did not answer GET /health with {\"status\":\"ok\"} in 30s (last error: %v)\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Register registers a client named name and returns its API key.
func (s *Server) Register(t *testing.T, name string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{
		"name": name, "email": name + "@example.com", "default_algorithm": "fixed_window",
	})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL+"/register", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /register: %v", err)
	}
	defer resp.Body.Close()
	var reply struct {
		APIKey string `json:"api_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || resp.StatusCode/100 != 2 || reply.APIKey == "" {
		t.Fatalf("POST /register: status %d, api_key %q, err %v", resp.StatusCode, reply.APIKey, err)
	}
	return reply.APIKey
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, s := range settings {
			if k == s {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
