package restapi

import (
	"net/http"
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

	// No configuration: an empty text, as the reference answers before its first.
	empty := newEnv(t, backends()[0])
	if r := empty.call(t, "GET", "/rlconfig", "", ""); r.status != http.StatusOK || r.body != "" {
		t.Errorf("GET /rlconfig without ConfigDump = %d %q, want 200 and no text", r.status, r.body)
	}
}
