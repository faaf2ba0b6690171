package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, path string) *http.Response {
	t.Helper()
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not here", http.StatusTeapot)
	})
	w := httptest.NewRecorder()
	Handler("/ui/", notFound).ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w.Result()
}

func TestHandler(t *testing.T) {
	for _, tt := range []struct {
		path, contentType string
	}{
		{"/ui/", "text/html; charset=utf-8"},
		{"/ui/app.js", "text/javascript; charset=utf-8"},
		{"/ui/app.css", "text/css; charset=utf-8"},
	} {
		res := serve(t, tt.path)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != tt.contentType {
			t.Errorf("GET %s = %d %q, want 200 %q", tt.path, res.StatusCode, res.Header.Get("Content-Type"), tt.contentType)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy = %q", tt.path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: headers %v", tt.path, res.Header)
		}
	}
	for _, path := range []string{"/ui/nope.js", "/ui/static/app.js", "/ui/../ui.go"} {
		if res := serve(t, path); res.StatusCode != http.StatusTeapot {
			t.Errorf("GET %s = %d, want the notFound handler's", path, res.StatusCode)
		}
	}
}

// TestPageLoadsNothingExternal: every URL the page names is its own, and
// the key is kept in sessionStorage only, never localStorage or a cookie.
func TestPageLoadsNothingExternal(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"|url\(([^)]*)\)|https?://[^\s'"<>)]+`).FindAllStringSubmatch(src, -1) {
			u := m[0]
			if strings.HasPrefix(u, "http://www.w3.org/2000/svg") {
				continue // the SVG namespace, not a fetch
			}
			if strings.Contains(u, "//") {
				t.Errorf("%s names an external URL: %s", name, u)
			}
		}
		if strings.Contains(src, "localStorage") || strings.Contains(src, "document.cookie") {
			t.Errorf("%s uses localStorage or cookies", name)
		}
	}
	res := serve(t, "/ui/")
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `<script src="app.js" defer></script>`) || strings.Contains(string(body), "<script>") {
		t.Error("index.html must load app.js only, with no inline script (the CSP forbids it)")
	}
}
