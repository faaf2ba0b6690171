package restapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestCORS(t *testing.T) {
	t.Parallel()
	const app = "https://app.example.com"
	e := newEnv(t, backends()[0], func(d *Deps) { d.CORSAllowedOrigins = []string{app, "https://admin.example.com"} })
	c := e.register(t, "cors")
	preflight := func(path, origin string) reply {
		return e.call(t, "OPTIONS", path, "", "", "Origin", origin, "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "x-api-key, content-type, idempotency-key")
	}
	for _, tt := range []struct{ path, methods string }{
		{"/check", "POST"}, {"/check/batch", "POST"}, {"/rules/api", "PUT, DELETE"}, {"/rules/list", "GET, PUT, DELETE"}, // PUT and DELETE: the rule named "list",
		{"/exemptions/a/b", "DELETE"}, {"/me", "GET"},
	} {
		r := preflight(tt.path, app)
		h := r.header
		if r.status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != app || h.Get("Access-Control-Allow-Methods") != tt.methods {
			t.Errorf("preflight %s from %s = %d, allow origin %q methods %q; want 204, %s, %s", tt.path, app, r.status,
				h.Get("Access-Control-Allow-Origin"), h.Get("Access-Control-Allow-Methods"), app, tt.methods)
		}
		for _, want := range []string{"X-API-Key", "Content-Type", "Idempotency-Key", "Authorization"} {
			if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
				t.Errorf("preflight %s: Access-Control-Allow-Headers %q lacks %s", tt.path, h.Get("Access-Control-Allow-Headers"), want)
			}
		}
	}
	// An origin not listed: no CORS headers, the route's own 405.
	r := preflight("/check", "https://evil.example.com")
	if r.status != http.StatusMethodNotAllowed || hasCORS(r.header) {
		t.Errorf("preflight from an origin not listed = %d %v; want 405 and no Access-Control-* headers", r.status, r.header)
	}
	// The request itself: the page may read the rate-limit headers.
	r = e.call(t, "POST", "/check", c.Key, `{"identifier":"u","limit":5,"window":60}`, "Origin", app)
	expose := r.header.Get("Access-Control-Expose-Headers")
	if r.status != http.StatusOK || r.header.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("POST /check from %s = %d, Access-Control-Allow-Origin %q", app, r.status, r.header.Get("Access-Control-Allow-Origin"))
	}
	for _, want := range []string{"RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Idempotent-Replayed", "RateLimit-Degraded"} {
		if !strings.Contains(expose, want) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", expose, want)
		}
	}
	r = e.call(t, "POST", "/check", c.Key, `{"identifier":"u","limit":5,"window":60}`, "Origin", "https://evil.example.com")
	if r.status != http.StatusOK || hasCORS(r.header) {
		t.Errorf("POST /check from an origin not listed = %d with CORS headers %v", r.status, r.header)
	}
}

func TestCORSOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	r := e.call(t, "OPTIONS", "/check", "", "", "Origin", "https://app.example.com", "Access-Control-Request-Method", "POST")
	if r.status != http.StatusMethodNotAllowed || hasCORS(r.header) {
		t.Errorf("preflight without CORS_ALLOWED_ORIGIN = %d %v; want 405, no CORS headers", r.status, r.header)
	}
	star := newEnv(t, backends()[0], func(d *Deps) { d.CORSAllowedOrigins = []string{"*"} })
	r = star.call(t, "OPTIONS", "/check", "", "", "Origin", "https://x.example", "Access-Control-Request-Method", "POST")
	if r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight with * = %d, Access-Control-Allow-Origin %q; want 204, *", r.status, r.header.Get("Access-Control-Allow-Origin"))
	}
}

func hasCORS(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			return true
		}
	}
	return false
}

func TestListResponseFormat(t *testing.T) {
	t.Parallel()
	for _, objects := range []bool{false, true} {
		e := newEnv(t, backends()[0], func(d *Deps) { d.ListObjects = objects })
		c := e.register(t, "lists")
		e.call(t, "POST", "/rules", c.Key, `{"name":"r","limit":5,"window":60}`)
		e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"x"}`)
		rules := e.call(t, "GET", "/rules/list", c.Key, "")
		exemptions := e.call(t, "GET", "/exemptions/list", c.Key, "")
		wantRules, wantExemptions := `[{"name":"r"`, `[{"identifier":"x"`
		if objects {
			wantRules, wantExemptions = `{"rules":[{"name":"r"`, `{"exemptions":[{"identifier":"x"`
		}
		if !strings.HasPrefix(rules.body, wantRules) || !strings.HasPrefix(exemptions.body, wantExemptions) {
			t.Errorf("objects=%v: /rules/list %s, /exemptions/list %s; want %s…, %s…", objects, rules.body, exemptions.body, wantRules, wantExemptions)
		}
	}
}
