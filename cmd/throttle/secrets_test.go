package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"redis://user:s3cret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"rediss://:s3cret@host:6379/0?cluster=true&addr=h2:6379", "rediss://:xxxxx@host:6379/0?cluster=true&addr=h2:6379"},
		{"redis://user:s3cret@host:notaport/0", "redis://user:xxxxx@host:notaport/0"},
		{"redis://us:er:p@ss@host/0", "redis://us:xxxxx@host/0"},
		{"redis://host:6379/0", "redis://host:6379/0"},
		{"redis://user@host:6379/0", "redis://user@host:6379/0"},
		{"postgres://app@db/throttle?sslmode=verify-full&password=s3cret&sslpassword=k3y", "postgres://app@db/throttle?sslmode=verify-full&password=xxxxx&sslpassword=xxxxx"},
		{"sqlite://throttle.db", "sqlite://throttle.db"},
	} {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	err := scrub(errors.New(`dial "redis://u:p%40ss@h" and p@ss`), urlSecrets("redis://u:p%40ss@h/0"))
	if got := err.Error(); got != `dial "redis://u:xxxxx@h" and xxxxx` {
		t.Errorf("scrubbed = %q", got)
	}
}

func TestRedactArgs(t *testing.T) {
	got := redactArgs([]string{"throttle", "serve", "--redis-url", "redis://u:s3cret@h/0", "-admin-api-key=adminkey0123456789",
		"--database-url=postgres://a:b@c/d", "--otel-exporter-otlp-headers", "k=v", "--port", "9000",
		"--redis-auth", "user:pw", "--redis-sentinel-auth=spw", "--redis-persecond-url", "rediss://:p@h2", "--redis-persecond-auth=x", "--redis-persecond-sentinel-auth", "y"})
	want := []string{"throttle", "serve", "--redis-url", "redis://u:xxxxx@h/0", "-admin-api-key=xxxxx",
		"--database-url=postgres://a:xxxxx@c/d", "--otel-exporter-otlp-headers", "xxxxx", "--port", "9000",
		"--redis-auth", "xxxxx", "--redis-sentinel-auth=xxxxx", "--redis-persecond-url", "rediss://:xxxxx@h2", "--redis-persecond-auth=xxxxx", "--redis-persecond-sentinel-auth", "xxxxx"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("redactArgs = %q\nwant %q", got, want)
	}
}

// Secrets of TestNoSecretsInOutput: none may appear in anything the
// binary prints or serves.
const (
	urlPassword = "s3cretPW"
	adminKey    = "adminSecretKey-0123456789"
	otelToken   = "otelS3cretToken"
)

func assertNoSecrets(t *testing.T, what, out string, more ...string) {
	t.Helper()
	for _, s := range append([]string{urlPassword, adminKey, otelToken}, more...) {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the secret %q:\n%s", what, s, out)
		}
	}
}

// TestNoSecretsInOutput runs the built binary with REDIS_URL and
// DATABASE_URL that do not parse, do not connect or do not authenticate,
// each with a password, and with an admin key, OTLP headers and API keys
// in use: its whole output (errors, start lines, logs at debug level),
// and its profiler's command line page, hold none of them.
func TestNoSecretsInOutput(t *testing.T) {
	closed := strconv.Itoa(testkit.FreePort(t))
	edgeFile, err := filepath.Abs("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  []string
		want string // in the output
	}{
		{"REDIS_URL does not parse", []string{"serve"}, []string{"REDIS_URL=redis://user:" + urlPassword + "@127.0.0.1:notaport/0"}, "redis://user:xxxxx@127.0.0.1:notaport/0"},
		{"DATABASE_URL does not parse", []string{"serve"}, []string{"DATABASE_URL=postgres://app:" + urlPassword + "@127.0.0.1:notaport/throttle"}, "open database postgres://app:xxxxx@127.0.0.1:notaport/throttle: database URL: cannot parse PostgreSQL connection string"},
		{"DATABASE_URL does not connect", []string{"serve"}, []string{"DATABASE_URL=postgres://app:" + urlPassword + "@127.0.0.1:" + closed + "/throttle?sslmode=disable"}, "open database postgres://app:xxxxx@127.0.0.1:" + closed + "/throttle?sslmode=disable: "},
		{"migrate, DATABASE_URL does not connect", []string{"migrate", "up"}, []string{"DATABASE_URL=postgres://app:" + urlPassword + "@127.0.0.1:" + closed + "/throttle?sslmode=disable"}, "connect"},
		{"OTLP headers not key=value", []string{"serve"}, []string{"OTEL_EXPORTER_OTLP_HEADERS=Authorization: Bearer " + otelToken}, "OTEL_EXPORTER_OTLP_HEADERS: a part is not key=value (not shown: it may hold a secret)"},
		{"config check", []string{"config", "check", edgeFile}, []string{"REDIS_URL=redis://:" + urlPassword + "@127.0.0.1:" + closed + "/0", "ADMIN_API_KEY=" + adminKey}, "1 file(s) OK"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			base := throttletest.Command(t, tt.args...)
			cmd := exec.CommandContext(ctx, base.Path, tt.args...)
			cmd.Dir, cmd.Env = base.Dir, append(base.Env, tt.env...)
			out, _ := cmd.CombinedOutput()
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
			assertNoSecrets(t, "the output", string(out))
		})
	}

	t.Run("serving", func(t *testing.T) {
		rdb := redistest.Start(t, "--requirepass", "the-right-one")
		otlp := "http://127.0.0.1:" + closed
		s := throttletest.Start(t, "LOG_LEVEL=debug", "DESCRIPTORS_DIR="+edgeDir(t),
			"REDIS_URL=redis://default:"+urlPassword+"@"+rdb.Addr()+"/0", "BACKEND_TIMEOUT=200ms",
			"ADMIN_API_KEY="+adminKey, "OTEL_EXPORTER_OTLP_ENDPOINT="+otlp, "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20"+otelToken)
		key := s.Register(t, "secret keeper")
		for _, k := range []string{key, adminKey, "thr_not-a-key-of-anyone"} {
			for _, path := range []string{"/check", "/descriptors/edge/counters"} {
				req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(`{"identifier":"u","limit":5,"window":60}`))
				req.Header.Set("X-API-Key", k)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := rlsv3.NewRateLimitServiceClient(plainGRPC(t, s.GRPCAddr)).ShouldRateLimit(ctx, edgeRequest("u")); err != nil {
			t.Fatal(err)
		}
		s.Stop(t, 30*time.Second)
		logs := s.Logs.String()
		if !strings.Contains(logs, "WRONGPASS") {
			t.Errorf("the logs do not say Redis refused the password:\n%s", logs)
		}
		assertNoSecrets(t, "the logs", logs, key)
	})

	t.Run("profiler command line", func(t *testing.T) {
		debugAddr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
		cmd := throttletest.Command(t, "serve", "--redis-url", "redis://:"+urlPassword+"@127.0.0.1:"+closed+"/0",
			"--admin-api-key="+adminKey, "--port", strconv.Itoa(testkit.FreePort(t)), "--grpc-port", strconv.Itoa(testkit.FreePort(t)),
			"--bind-address", "127.0.0.1", "--debug-address", debugAddr)
		var logs logbuf.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		var body []byte
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get("http://" + debugAddr + "/debug/pprof/cmdline")
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no profiler on %s: %v\n%s", debugAddr, err, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !bytes.Contains(body, []byte("redis://:xxxxx@127.0.0.1:"+closed+"/0")) || !bytes.Contains(body, []byte("--admin-api-key=xxxxx")) {
			t.Errorf("cmdline = %q, want the URL's password and the key hidden", body)
		}
		assertNoSecrets(t, "/debug/pprof/cmdline", string(body))
		assertNoSecrets(t, "the logs", logs.String())
	})
}
