package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
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

	// The xDS headers, OTLP endpoints with credentials, and a URL of any
	// other flag or argument.
	got = redactArgs([]string{"ratelimit", "--config-grpc-xds-client-additional-headers=authorization:Bearer t0ken", "-config-grpc-xds-client-additional-headers", "x-k:v",
		"--otel-exporter-otlp-endpoint", "https://u:pw@collector:4318?api_key=k3y&region=eu", "--otel-exporter-otlp-traces-endpoint=http://c:4318/v1/traces?token=t",
		"--descriptors-dir=http://u:pw@x/", "postgres://a:b@c/d", "--redis-auth="})
	want = []string{"ratelimit", "--config-grpc-xds-client-additional-headers=xxxxx", "-config-grpc-xds-client-additional-headers", "xxxxx",
		"--otel-exporter-otlp-endpoint", "https://u:xxxxx@collector:4318?api_key=xxxxx&region=eu", "--otel-exporter-otlp-traces-endpoint=http://c:4318/v1/traces?token=xxxxx",
		"--descriptors-dir=http://u:xxxxx@x/", "postgres://a:xxxxx@c/d", "--redis-auth=xxxxx"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("redactArgs = %q\nwant %q", got, want)
	}
}

// TestSecretSettings: every setting whose name speaks of a secret (a key,
// a password, credentials, headers, a URL or an endpoint) is hidden
// (secretSettings), or is known not to hold one; and a value that does not
// parse is never quoted in the error.
func TestSecretSettings(t *testing.T) {
	notSecret := map[string]string{
		"STATS_MAX_VALUE_KEYS": "a number", "CACHE_KEY_PREFIX": "a key prefix", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "a switch",
		"MAX_KEYS_PER_CLIENT": "a number", "RATE_LIMIT_HEADERS": "header sets", "RATE_LIMIT_RESPONSE_HEADERS": "a switch",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "a switch", "GRPC_SERVER_TLS_KEY": "a file path", "HTTP_TLS_KEY": "a file path",
		"REDIS_TLS_CLIENT_KEY": "a file path", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "a file path",
	}
	for _, s := range serveSettings {
		_, secret := secretSettings[s.env]
		if s.set == nil { // its value is never read
			continue
		}
		if strings.Contains(s.env, "LIMIT_") && strings.HasSuffix(s.env, "_HEADER") { // header names
			continue
		}
		for _, w := range []string{"KEY", "AUTH", "PASSWORD", "TOKEN", "SECRET", "CREDENTIAL", "HEADERS", "URL", "ENDPOINT"} {
			if strings.Contains(s.env, w) && !secret && notSecret[s.env] == "" {
				t.Errorf("%s: is it a secret? Put it in secretSettings, or in this test's notSecret", s.env)
			}
		}
	}
	for env := range secretSettings {
		if !slices.ContainsFunc(serveSettings, func(s setting) bool { return s.env == env }) {
			t.Errorf("secretSettings names %s, which is no setting", env)
		}
	}
	_, err := parseServe(nil, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://u:" + urlPassword + "@collector"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "ftp://u:xxxxx@collector") {
		t.Errorf("a bad OTLP endpoint: %v, want it named with its password hidden", err)
	}
	assertNoSecrets(t, "the error", fmt.Sprint(err))
}

// Secrets of TestNoSecretsInOutput: none may appear in anything the
// binary prints or serves.
const (
	urlPassword = "s3cretPW"
	adminKey    = "adminSecretKey-0123456789"
	otelToken   = "otelS3cretToken"
	xdsToken    = "xdsS3cretToken"
)

func assertNoSecrets(t *testing.T, what, out string, more ...string) {
	t.Helper()
	for _, s := range append([]string{urlPassword, adminKey, otelToken, xdsToken}, more...) {
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
			"--bind-address", "127.0.0.1", "--debug-address", debugAddr,
			"--config-type=GRPC_XDS_SOTW", "--config-grpc-xds-server-url", "127.0.0.1:"+closed, "--force-start-without-initial-config=true",
			"--config-grpc-xds-client-additional-headers", "authorization:Bearer "+xdsToken,
			"--otel-exporter-otlp-endpoint=http://collector:"+urlPassword+"@127.0.0.1:"+closed+"?api_key="+otelToken)
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
		for _, want := range []string{"redis://:xxxxx@127.0.0.1:" + closed + "/0", "--admin-api-key=xxxxx", "--config-grpc-xds-client-additional-headers\x00xxxxx",
			"--otel-exporter-otlp-endpoint=http://collector:xxxxx@127.0.0.1:" + closed + "?api_key=xxxxx"} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("cmdline = %q, want %q: the URLs' passwords, the keys and the headers hidden", body, want)
			}
		}
		assertNoSecrets(t, "/debug/pprof/cmdline", string(body))
		assertNoSecrets(t, "the logs", logs.String())
	})
}
