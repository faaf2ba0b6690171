package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The doors the reference service opened (issue 44): who may knock on
// POST /json, the debug port, /rlconfig and /metrics of the REST port, and
// the GRPC_UDS socket, through the built binary.

// postEnvoyJSON sends body to POST /json with the Content-Type ct (none
// when empty) and the API key key (none when empty), and returns the
// status and the body.
func postEnvoyJSON(t *testing.T, c *http.Client, base, ct, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/json", strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// edgeJSON is edgeRequest(user) as POST /json takes it.
func edgeJSON(user string) string {
	return `{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"api"},{"key":"user_id","value":"` + user + `"}]}]}`
}

// TestJSONDoor: POST /json is off unless JSON_ON_REST_PORT (or the name
// ratelimit, TestReferenceEndpoints) turns it on; on, it takes only
// application/json, decides the YAML's domains for anyone, as the
// reference, and a REST client's domain only with that client's key: an
// anonymous call with hits_addend 5 spends nothing of it.
func TestJSONDoor(t *testing.T) {
	edge := edgeDir(t)
	off := throttletest.Start(t, "DESCRIPTORS_DIR="+edge)
	if code, body := postEnvoyJSON(t, off.HTTP, off.URL, "application/json", "", edgeJSON("u")); code != http.StatusNotFound {
		t.Errorf("POST /json without JSON_ON_REST_PORT = %d %s, want 404", code, body)
	}

	s := throttletest.Start(t, "DESCRIPTORS_DIR="+edge, "JSON_ON_REST_PORT=true", "ADMIN_API_KEY="+tenancyAdminKey)
	shopKey := s.RegisterDomain(t, "shop", "shop", tenancyAdminKey)
	otherKey := s.Register(t, "other")
	if status, _, body := doJSON(t, "POST", s.URL+"/rules", shopKey, `{"name":"k","algorithm":"fixed_window","limit":5,"window":60,"descriptors":[{"key":"k"}]}`); status != http.StatusCreated {
		t.Fatalf("POST /rules: %d %v", status, body)
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		if code, body := postEnvoyJSON(t, s.HTTP, s.URL, ct, "", edgeJSON("u")); code != http.StatusUnsupportedMediaType || !strings.Contains(body, "only Content-Type: application/json") {
			t.Errorf("POST /json as %q = %d %q, want 415", ct, code, body)
		}
	}
	for i, want := range []int{200, 200, 429} { // the YAML's 2 an hour, for anyone
		if code, body := postEnvoyJSON(t, s.HTTP, s.URL, "application/json; charset=utf-8", "", edgeJSON("u")); code != want {
			t.Errorf("POST /json edge %d = %d %s, want %d", i, code, body, want)
		}
	}

	shop := func(hits int) string {
		return `{"domain":"shop","hits_addend":` + strconv.Itoa(hits) + `,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	}
	for _, tt := range []struct {
		name, key string
		code      int
		msg       string
	}{
		{"no key", "", 401, `domain "shop" belongs to a REST client: send that client's API key`},
		{"an unknown key", "thr_not-a-key-of-anyone", 401, "the API key is not valid"},
		{"another client's key", otherKey, 403, `domain "shop" is not your client's`},
	} {
		if code, body := postEnvoyJSON(t, s.HTTP, s.URL, "application/json", tt.key, shop(5)); code != tt.code || !strings.Contains(body, tt.msg) {
			t.Errorf("POST /json shop with %s = %d %q, want %d %q", tt.name, code, body, tt.code, tt.msg)
		}
	}
	// None of them spent the client's 5: its own key spends them all.
	if code, body := postEnvoyJSON(t, s.HTTP, s.URL, "application/json", shopKey, shop(5)); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("POST /json shop with its key, 5 hits = %d %s, want 200 OK", code, body)
	}
	if code, body := postEnvoyJSON(t, s.HTTP, s.URL, "application/json", shopKey, shop(1)); code != 429 {
		t.Errorf("POST /json shop with its key, a 6th hit = %d %s, want 429", code, body)
	}
}

// TestJSONDoorMutualTLS: when gRPC asks client certificates, POST /json
// asks the same: over plain HTTP it refuses every call (and the start says
// so); over HTTPS with client certificates, only a certificate gRPC would
// take (its CA, one of GRPC_CLIENT_TLS_SAN) passes, though the REST API
// takes any the REST CA signed.
func TestJSONDoorMutualTLS(t *testing.T) {
	srv := newTLSFiles(t)
	const spiffe = "spiffe://cluster.local/ns/gw/sa/envoy"
	env := []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + srv.files.Cert, "GRPC_SERVER_TLS_KEY=" + srv.files.Key,
		"GRPC_CLIENT_TLS_CACERT=" + srv.files.CA, "GRPC_CLIENT_TLS_SAN=" + spiffe, "JSON_ON_REST_PORT=true", "DESCRIPTORS_DIR=" + edgeDir(t)}

	plain := throttletest.Start(t, env...)
	if code, body := postEnvoyJSON(t, plain.HTTP, plain.URL, "application/json", "", edgeJSON("u")); code != http.StatusForbidden || !strings.Contains(body, "asks the client certificate the gRPC port asks") {
		t.Errorf("POST /json over plain HTTP = %d %q, want 403", code, body)
	}
	if logs := plain.Logs.String(); !strings.Contains(logs, "POST /json refuses every call") {
		t.Errorf("the start does not say /json refuses every call:\n%s", logs)
	}

	envoy := srv.ca.Issue(t, certtest.Leaf{URIs: []string{spiffe}})
	app := srv.ca.Issue(t, certtest.Leaf{URIs: []string{"spiffe://cluster.local/ns/shop/sa/app"}})
	s := throttletest.StartTLS(t, srv.httpsClient(t, &app), append(env,
		"HTTP_TLS_CERT="+srv.files.Cert, "HTTP_TLS_KEY="+srv.files.Key, "HTTP_CLIENT_TLS_CACERT="+srv.files.CA)...)
	if code, body := postEnvoyJSON(t, srv.httpsClient(t, &app), s.URL, "application/json", "", edgeJSON("u")); code != http.StatusForbidden || !strings.Contains(body, "none of the SANs is allowed") {
		t.Errorf("POST /json with the app's certificate = %d %q, want 403", code, body)
	}
	if code, body := postEnvoyJSON(t, srv.httpsClient(t, &envoy), s.URL, "application/json", "", edgeJSON("u")); code != http.StatusOK {
		t.Errorf("POST /json with Envoy's certificate = %d %q, want 200", code, body)
	}
}

// TestRESTPortPages: GET /rlconfig is off on the REST port unless
// RLCONFIG_ON_REST_PORT, /metrics on unless METRICS_ON_REST_PORT=false.
func TestRESTPortPages(t *testing.T) {
	edge := edgeDir(t)
	def := throttletest.Start(t, "DESCRIPTORS_DIR="+edge)
	if code, _, body := testkit.GetText(t, def.URL+"/rlconfig"); code != http.StatusNotFound {
		t.Errorf("GET /rlconfig by default = %d %q, want 404", code, body)
	}
	if code, _, body := testkit.GetText(t, def.URL+"/metrics"); code != http.StatusOK || !strings.Contains(body, "throttle_") {
		t.Errorf("GET /metrics by default = %d %.200q, want 200 and the metrics", code, body)
	}

	s := throttletest.Start(t, "DESCRIPTORS_DIR="+edge, "RLCONFIG_ON_REST_PORT=true", "METRICS_ON_REST_PORT=false")
	if code, _, body := testkit.GetText(t, s.URL+"/rlconfig"); code != http.StatusOK || !strings.Contains(body, "edge.generic_key_api.user_id: unit=HOUR requests_per_unit=2") {
		t.Errorf("GET /rlconfig with RLCONFIG_ON_REST_PORT = %d %q, want 200 and the edge limit", code, body)
	}
	if code, _, body := testkit.GetText(t, s.URL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("GET /metrics with METRICS_ON_REST_PORT=false = %d %.200q, want 404", code, body)
	}
	if code, _, body := testkit.GetText(t, s.URL+"/"); code != http.StatusOK || strings.Contains(body, "metrics") {
		t.Errorf("GET / without /metrics = %d %s, want no metrics in the index", code, body)
	}
}

// TestDebugPortDoor: DEBUG_PORT alone listens on loopback, not on every
// interface as BIND_ADDRESS's default would; another DEBUG_HOST is warned
// about. A profile of up to debugport.MaxProfileSeconds is served, a longer one
// refused at once.
func TestDebugPortDoor(t *testing.T) {
	start := func(debugHost string) (*throttletest.Server, string) {
		t.Helper()
		debugPort := strconv.Itoa(testkit.FreePort(t))
		env := []string{"PORT=" + strconv.Itoa(testkit.FreePort(t)), "GRPC_PORT=" + strconv.Itoa(testkit.FreePort(t)), "HOST=127.0.0.1",
			"GRPC_HOST=127.0.0.1", "DEBUG_PORT=" + debugPort, "LOG_LEVEL=info"}
		if debugHost != "" {
			env = append(env, "DEBUG_HOST="+debugHost)
		}
		return throttletest.StartReference(t, env...), debugPort
	}
	s, port := start("")
	logs := s.Logs.String()
	if !strings.Contains(logs, `"msg":"serving the debug port","addr":"127.0.0.1:`+port+`"`) || strings.Contains(logs, "beyond loopback") {
		t.Errorf("DEBUG_PORT alone: the log does not say the debug port listens on 127.0.0.1:%s, without a warning:\n%s", port, logs)
	}
	debug := "http://127.0.0.1:" + port
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tt := range []struct {
		path string
		code int
		want string
	}{
		{"/debug/pprof/profile?seconds=61", 400, `seconds="61": give a number of seconds above 0 and at most 60`},
		{"/debug/pprof/trace?seconds=3600", 400, "at most 60"},
		{"/debug/pprof/heap?seconds=x", 400, `seconds="x"`},
		{"/debug/pprof/profile?seconds=1", 200, ""},
	} {
		resp, err := client.Get(debug + tt.path)
		if err != nil {
			t.Errorf("GET %s: %v", tt.path, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(string(b), tt.want) || len(b) == 0 {
			t.Errorf("GET %s = %d %.200q, want %d %q", tt.path, resp.StatusCode, b, tt.code, tt.want)
		}
	}

	open, _ := start("0.0.0.0")
	if logs := open.Logs.String(); !strings.Contains(logs, `"level":"WARN","msg":"the debug port listens beyond loopback`) {
		t.Errorf("DEBUG_HOST=0.0.0.0: no warning in the log:\n%s", logs)
	}
}

// TestGRPCUDSMode: the GRPC_UDS socket is 0660 under umask 000, where it
// was 0777: any local user could connect.
func TestGRPCUDSMode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rls.sock")
	port := strconv.Itoa(testkit.FreePort(t))
	base := throttletest.Command(t, "serve")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "sh", "-c", `umask 000 && exec "$0" serve`, base.Path)
	cmd.Dir, cmd.Env = base.Dir, append(base.Env, "PORT="+port, "BIND_ADDRESS=127.0.0.1", "GRPC_UDS="+sock)
	var logs logbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	// Every port is bound before any serves: /health answers after the
	// socket got its mode.
	waitUntil(t, "GET /health", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	if got := fi.Mode().Perm(); got != 0o660 {
		t.Errorf("GRPC_UDS socket mode %o under umask 000, want 660", got)
	}
	rls := rlsDial(t, "unix:"+sock)
	if _, err := rls.ShouldRateLimit(context.Background(), edgeRequest("u")); err != nil {
		t.Errorf("ShouldRateLimit on the socket: %v", err)
	}
}
