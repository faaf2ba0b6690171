// Package throttletest builds the throttle binary and runs it for tests as a
// user would: `throttle serve` on free loopback ports, its own working
// directory (so the default sqlite://throttle.db lands in a temp dir), and
// an environment made from scratch: only the settings the test gives.
package throttletest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
)

// Server is one running `throttle serve`.
type Server struct {
	// URL is the REST API's base URL, such as "http://127.0.0.1:41234".
	URL string
	// GRPCAddr is the gRPC listen address, host:port.
	GRPCAddr string
	// Logs holds everything the process wrote to stdout and stderr.
	Logs *logbuf.Buffer
	// Exited receives the process's exit once it ends.
	Exited <-chan error
	// HTTP is the client of URL (http.DefaultClient unless StartTLS).
	HTTP *http.Client

	cmd *exec.Cmd
}

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// Binary builds ./cmd/throttle once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "throttle-bin-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "throttle")
		// -trimpath as the release build (scripts/release-binaries.sh) and
		// make build: one compilation of each package serves all three.
		cmd := exec.Command("go", "build", "-trimpath", "-o", build.bin, "./cmd/throttle")
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("go build ./cmd/throttle: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// Start runs `throttle serve` with the extra settings env ("NAME=value"; a
// later one wins) and returns once GET /health answers. Defaults: loopback
// only, LOG_LEVEL=warn, SQLite in the server's temp working directory. The
// server is killed when the test ends; its logs are printed if the test failed.
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	return start(t, "http", http.DefaultClient, env)
}

// StartTLS is Start for a server whose env serves HTTPS (HTTP_TLS_CERT…):
// URL is https://127.0.0.1:PORT, and client (trusting the server's CA,
// with a client certificate if the server asks for one) answers /health
// and is the server's HTTP.
func StartTLS(t testing.TB, client *http.Client, env ...string) *Server {
	t.Helper()
	return start(t, "https", client, env)
}

func start(t testing.TB, scheme string, client *http.Client, env []string) *Server {
	t.Helper()
	httpPort, grpcPort := testkit.FreePort(t), testkit.FreePort(t)
	cmd := exec.Command(Binary(t), "serve")
	cmd.Env = append(baseEnv(),
		"PORT="+strconv.Itoa(httpPort),
		"GRPC_PORT="+strconv.Itoa(grpcPort),
		"BIND_ADDRESS=127.0.0.1",
		"LOG_LEVEL=warn",
	)
	cmd.Env = append(cmd.Env, env...)
	return launch(t, cmd, scheme, client, httpPort, grpcPort)
}

// StartReference runs the binary as a deployment of Envoy's reference
// service (envoyproxy/ratelimit) runs its /bin/ratelimit: under the name
// ratelimit, with no arguments, and only env (no default of Start's), so a
// test can give a deployment's environment word for word. env must set
// PORT and GRPC_PORT (free ones: testkit.FreePort); the server is reached
// on 127.0.0.1, and is returned once GET /health answers.
func StartReference(t testing.TB, env ...string) *Server {
	t.Helper()
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(Binary(t), link); err != nil {
		t.Fatal(err)
	}
	port := func(name string) int {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], name+"="); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("StartReference: %s=%q is not a port", name, v)
				}
				return n
			}
		}
		t.Fatalf("StartReference: env sets no %s", name)
		return 0
	}
	httpPort, grpcPort := port("PORT"), port("GRPC_PORT")
	cmd := exec.Command(link)
	cmd.Env = append(baseEnv(), env...)
	return launch(t, cmd, "http", http.DefaultClient, httpPort, grpcPort)
}

// launch starts cmd in a temp working directory and returns once GET
// /health answers on httpPort; the process is killed when the test ends,
// and its logs printed if the test failed.
func launch(t testing.TB, cmd *exec.Cmd, scheme string, client *http.Client, httpPort, grpcPort int) *Server {
	t.Helper()
	cmd.Dir = t.TempDir()
	logs := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start throttle: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s := &Server{
		URL:      scheme + "://127.0.0.1:" + strconv.Itoa(httpPort),
		GRPCAddr: "127.0.0.1:" + strconv.Itoa(grpcPort),
		Logs:     logs,
		Exited:   exited,
		HTTP:     client,
		cmd:      cmd,
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("throttle output (%s):\n%s", s.URL, logs.String())
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("throttle exited before answering /health: %v\n%s", err, logs.String())
		default:
		}
		resp, err := client.Get(s.URL + "/health")
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

// Command is the throttle binary run with args, in a temp working
// directory, with the environment every server starts from (append the
// test's settings to its Env).
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = baseEnv()
	return cmd
}

// PID is the server's process id (for /proc/PID readings).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Signal sends sig to the server process.
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Stop sends SIGTERM, as Kubernetes does, and fails the test unless the
// server drains and exits 0 within wait.
func (s *Server) Stop(t testing.TB, wait time.Duration) {
	t.Helper()
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-s.Exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(wait):
		t.Fatalf("server still running %v after SIGTERM", wait)
	}
}

// Register registers a client named name (its email derived from the name)
// and returns its API key. The client has no Envoy domain: RegisterDomain
// gives one.
func (s *Server) Register(t testing.TB, name string) string {
	t.Helper()
	return s.register(t, name, "", "")
}

// RegisterDomain registers a client named name with the Envoy domain, as
// the operator grants it: with key the operator's (ADMIN_API_KEY), or ""
// for a domain the server's CLAIMABLE_DOMAINS allows. It returns the
// client's API key.
func (s *Server) RegisterDomain(t testing.TB, name, domain, key string) string {
	t.Helper()
	return s.register(t, name, domain, key)
}

func (s *Server) register(t testing.TB, name, domain, key string) string {
	t.Helper()
	fields := map[string]string{
		"name": name, "email": strings.ReplaceAll(name, " ", "-") + "@example.com", "default_algorithm": "fixed_window",
	}
	if domain != "" {
		fields["domain"] = domain
	}
	body, _ := json.Marshal(fields)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL+"/register", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatalf("POST /register: %v", err)
	}
	defer resp.Body.Close()
	var reply struct {
		APIKey string `json:"api_key"`
		Domain string `json:"domain"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || resp.StatusCode/100 != 2 || reply.APIKey == "" || reply.Domain != domain {
		t.Fatalf("POST /register: status %d, api_key %q, domain %q (want %q), err %v", resp.StatusCode, reply.APIKey, reply.Domain, domain, err)
	}
	return reply.APIKey
}

// Metric returns the sum of the samples of the metric family name on the
// server's /metrics (0 when absent).
func (s *Server) Metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := s.HTTP.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // another family with this prefix
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// baseEnv is the environment every server starts from: none of the
// test's own (make test exports settings for other tests, and the
// OpenTelemetry libraries read OTEL_* variables by themselves), only what a
// process needs to find programs and its home.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// moduleRoot is the folder of go.mod above the test's working directory.
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}
