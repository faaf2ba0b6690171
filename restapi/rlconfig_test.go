package restapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestConfigDump(t *testing.T) {
	t.Parallel()
	const dump = "edge.generic_key_api: unit=MINUTE requests_per_unit=10, shadow_mode: false\n"
	e := newEnv(t, backends()[0], func(d *Deps) { d.ConfigDump = func() string { return dump } })
	r := e.call(t, "GET", "/rlconfig", "", "")
	if r.status != http.StatusOK || r.body != dump || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("GET /rlconfig = %d %q (%s), want 200 %q as text/plain", r.status, r.body, r.header.Get("Content-Type"), dump)
	}
	if got := counterValue(t, e.reg, "throttle_http_requests_total", map[string]string{"route": "GET /rlconfig", "method": "GET", "status": "200"}); got != 1 {
		t.Errorf("throttle_http_requests_total{route=GET /rlconfig} = %v, want 1", got)
	}
	wantError(t, e.call(t, "POST", "/rlconfig", "", ""), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")

	// No ConfigDump (RLCONFIG_ON_REST_PORT off): no such route, and no
	// /metrics without a Gatherer; the index then names no metrics.
	off := newEnv(t, backends()[0], func(d *Deps) { d.Gatherer = nil })
	wantError(t, off.call(t, "GET", "/rlconfig", "", ""), http.StatusNotFound, "NOT_FOUND")
	wantError(t, off.call(t, "GET", "/metrics", "", ""), http.StatusNotFound, "NOT_FOUND")
	if r := off.call(t, "GET", "/", "", ""); r.status != http.StatusOK || strings.Contains(r.body, "metrics") {
		t.Errorf("GET / without /metrics = %d %s, want 200 without metrics", r.status, r.body)
	}
}
