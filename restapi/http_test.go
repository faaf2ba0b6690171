package restapi

import (
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
)

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "routing")

	r := e.call(t, "GET", "/nowhere", c.Key, "")
	wantError(t, r, http.StatusNotFound, "NOT_FOUND")
	if want := `{"error":"no such route: GET /nowhere","code":"NOT_FOUND"}`; strings.TrimSpace(r.body) != want {
		t.Errorf("404 body = %s, want %s", r.body, want)
	}

	r = e.call(t, "GET", "/check", c.Key, "")
	wantError(t, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	if allow := r.header.Get("Allow"); allow != "POST" {
		t.Errorf("Allow = %q, want POST", allow)
	}
	if want := `{"error":"method GET is not allowed on /check; allowed: POST","code":"METHOD_NOT_ALLOWED"}`; strings.TrimSpace(r.body) != want {
		t.Errorf("405 body = %s, want %s", r.body, want)
	}
	r = e.call(t, "PATCH", "/rules/x", c.Key, "")
	wantError(t, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	if allow := r.header.Get("Allow"); allow != "DELETE, PUT" {
		t.Errorf("Allow = %q, want DELETE, PUT", allow)
	}

	// The dashboard: its page, JSON 404s for files it does not have, and a
	// redirect from /ui.
	if r := e.call(t, "GET", "/ui/", "", ""); r.status != http.StatusOK || !strings.Contains(r.body, "<title>Throttle · Dashboard</title>") {
		t.Errorf("GET /ui/ = %d %.80q", r.status, r.body)
	}
	wantError(t, e.call(t, "GET", "/ui/missing.js", "", ""), http.StatusNotFound, "NOT_FOUND")
	if w := serve(e.handler, newRequest(t, "GET", "/ui", "")); w.Code/100 != 3 || w.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui = %d Location %q, want a redirect to /ui/", w.Code, w.Header().Get("Location"))
	}

	// GET /: a browser goes to the dashboard, a program gets an index.
	browser := newRequest(t, "GET", "/", "")
	browser.Header.Set("Accept", "text/html,application/xhtml+xml")
	if w := serve(e.handler, browser); w.Code != http.StatusFound || w.Header().Get("Location") != "/ui/" {
		t.Errorf("GET / from a browser = %d Location %q, want 302 to /ui/", w.Code, w.Header().Get("Location"))
	}
	r = e.call(t, "GET", "/", "", "")
	if want := `{"service":"throttle","dashboard":"/ui/","register":"POST /register","health":"/health","ready":"/ready","metrics":"/metrics","docs":"README.md and docs/api.md (every endpoint) in Throttle's source repository"}`; r.status != http.StatusOK || strings.TrimSpace(r.body) != want {
		t.Errorf("GET / = %d %s, want 200 %s", r.status, r.body, want)
	}
	wantError(t, e.call(t, "POST", "/", "", "{}"), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")

	big := `{"identifier":"` + strings.Repeat("x", maxBodyBytes) + `"}`
	wantError(t, e.call(t, "POST", "/check", c.Key, big), http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE")
	wantError(t, e.call(t, "POST", "/register", "", big), http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE")

	body := `{"identifier":"u","limit":5,"window":60}`
	wantError(t, e.call(t, "POST", "/check", c.Key, body, "Content-Type", "text/xml"), http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE")
	wantError(t, e.call(t, "POST", "/check", c.Key, body, "Content-Type", "multipart/form-data; boundary=x"), http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE")
	// curl -d without -H sends application/x-www-form-urlencoded: accepted, as
	// the product's own example for /check with a rule does that.
	for _, ct := range []string{"application/x-www-form-urlencoded", "application/json; charset=utf-8", ""} {
		req := newRequest(t, "POST", "/check", body)
		req.Header.Set("X-API-Key", c.Key)
		req.Header.Del("Content-Type")
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if w := serve(e.handler, req); w.Code != http.StatusOK {
			t.Errorf("POST /check with Content-Type %q = %d %s, want 200", ct, w.Code, w.Body)
		}
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, tt := range []struct{ sent, want string }{
		{"", ""},
		{"abc-123", "abc-123"},
		{strings.Repeat("a", 128), strings.Repeat("a", 128)},
		{strings.Repeat("a", 129), ""},
		{"has space", ""},
		{"tab\there", ""},
		{"ünïcode", ""},
	} {
		var hdr []string
		if tt.sent != "" {
			hdr = []string{"X-Request-ID", tt.sent}
		}
		r := e.call(t, "GET", "/health", "", "", hdr...)
		got := r.header.Get("X-Request-ID")
		if tt.want != "" && got != tt.want {
			t.Errorf("sent X-Request-ID %q: got %q, want it kept", tt.sent, got)
		}
		if tt.want == "" && !generated.MatchString(got) {
			t.Errorf("sent X-Request-ID %q: got %q, want a generated id", tt.sent, got)
		}
	}
	// Errors carry one too.
	if r := e.call(t, "GET", "/nowhere", "", ""); r.header.Get("X-Request-ID") == "" {
		t.Errorf("404 without X-Request-ID")
	}
	if !strings.Contains(e.logs.String(), `"request_id":"abc-123"`) {
		t.Errorf("no log line with request_id abc-123:\n%s", e.logs)
	}
}

func TestPanicRecovery(t *testing.T) {
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	h := withRequestID(log)(recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	})))
	req := newRequest(t, "GET", "/", "")
	req.Header.Set("X-Request-ID", "req-1")
	w := serve(h, req)
	if want := `{"error":"internal error","code":"INTERNAL","request_id":"req-1"}`; w.Code != 500 || strings.TrimSpace(w.Body.String()) != want {
		t.Errorf("panic reply = %d %s, want 500 %s", w.Code, w.Body, want)
	}
	if strings.Contains(w.Body.String(), "boom") || strings.Contains(w.Body.String(), "goroutine") {
		t.Errorf("panic reply leaks details: %s", w.Body)
	}
	if l := logs.String(); !strings.Contains(l, `"panic":"boom"`) || !strings.Contains(l, `"request_id":"req-1"`) || !strings.Contains(l, "goroutine") {
		t.Errorf("panic log = %s, want the value, request id and stack", l)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "metrics")
	e.check(t, c, `{"identifier":"u","limit":1,"window":60,"algorithm":"fixed_window"}`)
	e.check(t, c, `{"identifier":"u","limit":1,"window":60,"algorithm":"fixed_window"}`)
	e.call(t, "DELETE", "/rules/some-rule-name", c.Key, "")
	e.call(t, "GET", "/no/such/path", "", "")

	for _, tt := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"route": "POST /check", "method": "POST", "status": "200"}, 2},
		{map[string]string{"route": "POST /register", "method": "POST", "status": "201"}, 1},
		{map[string]string{"route": "DELETE /rules/{name}", "method": "DELETE", "status": "404"}, 1},
		{map[string]string{"route": "unmatched", "method": "GET", "status": "404"}, 1},
	} {
		if got := counterValue(t, e.reg, "throttle_http_requests_total", tt.labels); got != tt.want {
			t.Errorf("throttle_http_requests_total%v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	for outcome, want := range map[string]float64{"allowed": 1, "rejected": 1} {
		labels := map[string]string{"api": "rest", "algorithm": "fixed_window", "outcome": outcome}
		if got := counterValue(t, e.reg, "throttle_decisions_total", labels); got != want {
			t.Errorf("throttle_decisions_total%v = %v, want %v", labels, got, want)
		}
	}

	r := e.call(t, "GET", "/metrics", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", r.status)
	}
	for _, want := range []string{
		`throttle_http_request_duration_seconds_bucket{method="POST",route="POST /check",status="200",le="0.0005"}`,
		`throttle_http_requests_in_flight 1`,
		`throttle_decisions_total{accuracy="exact",algorithm="fixed_window",api="rest",outcome="allowed"} 1`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}
	if strings.Contains(r.body, "some-rule-name") || strings.Contains(r.body, "/no/such/path") {
		t.Errorf("GET /metrics has raw paths as labels")
	}

	// A second handler on the same registry shares the metrics.
	reg := prometheus.NewRegistry()
	NewHandler(Deps{Registerer: reg})
	NewHandler(Deps{Registerer: reg})
}
