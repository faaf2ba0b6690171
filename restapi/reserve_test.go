package restapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestRuleReserve: a rule with descriptors takes a reserve (hits, ttl in
// seconds, handle), shows it, and refuses one it cannot honour with 400
// and the reason; MAX_RESERVATION_TTL (60s by default) bounds the ttl.
func TestRuleReserve(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "reserve", `"default_algorithm":"fixed_window"`)
		r := e.call(t, "POST", "/rules", c.Key, `{"name":"tokens","limit":10000,"window":3600,"always_count":true,"descriptors":[{"key":"tenant"}],
			"reserve":{"hits":1000,"ttl":60,"handle":"request_id"}}`)
		want := `{"name":"tokens","algorithm":"fixed_window","limit":10000,"window":3600,"always_count":true,"accuracy":"exact","scope":"regional",` +
			`"descriptors":[{"key":"tenant"}],"reserve":{"hits":1000,"ttl":60,"handle":"request_id"},"created_at":"`
		if r.status != http.StatusCreated || !strings.HasPrefix(r.body, want) {
			t.Fatalf("POST /rules with reserve = %d %s\nwant %s…", r.status, r.body, want)
		}
		if list := e.call(t, "GET", "/rules/list", c.Key, ""); !strings.Contains(list.body, `"reserve":{"hits":1000,"ttl":60,"handle":"request_id"}`) {
			t.Errorf("GET /rules/list = %s", list.body)
		}
		for _, tt := range []struct{ name, body, code, msg string }{
			{"ttl over MAX_RESERVATION_TTL", `{"name":"x","limit":10,"window":60,"descriptors":[{"key":"k"}],"reserve":{"hits":1,"ttl":61,"handle":"h"}}`,
				"INVALID_FIELD", "reserve.ttl 61 must be between 1 and 60 seconds (MAX_RESERVATION_TTL)"},
			{"hits over the limit", `{"name":"x","limit":10,"window":60,"descriptors":[{"key":"k"}],"reserve":{"hits":11,"ttl":6,"handle":"h"}}`,
				"INVALID_FIELD", "reserve.hits 11 must be between 1 and the limit, 10"},
			{"without descriptors", `{"name":"x","limit":10,"window":60,"reserve":{"hits":1,"ttl":6,"handle":"h"}}`,
				"INVALID_FIELD", "reserve is only for rules with descriptors: it reserves on Envoy's calls"},
			{"a typo", `{"name":"x","limit":10,"window":60,"descriptors":[{"key":"k"}],"reserve":{"hits":1,"tll":6,"handle":"h"}}`,
				"UNKNOWN_FIELD", `unknown field "tll"`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := e.call(t, "POST", "/rules", c.Key, tt.body)
				wantError(t, r, http.StatusBadRequest, tt.code)
				if got := decodeReply[errorReply](t, r).Error; got != tt.msg {
					t.Errorf("error = %q, want %q", got, tt.msg)
				}
			})
		}
	})
}
