package restapi

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// withGlobalScope is a server with a global Redis (GLOBAL_REDIS_URL).
func withGlobalScope(d *Deps) { d.GlobalScope = true }

// TestRuleScope: a rule's scope (regional by default, or global) is taken
// on create and update, for its one limit and for each of its
// rate_limits, shown in every reply and the list; global means accuracy
// approximate; an override of a global rule is taken.
func TestRuleScope(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, withGlobalScope)
		c := e.register(t, "scope", `"default_algorithm":"sliding_window"`)
		r := e.call(t, "POST", "/rules", c.Key, `{"name":"tenant","algorithm":"fixed_window","limit":6000,"window":60,"scope":"global"}`)
		tenant := ruleReply{Name: "tenant", Algorithm: "fixed_window", Limit: 6000, Window: win(60), Accuracy: "approximate", Scope: "global"}
		if diff := cmp.Diff(tenant, decodeReply[ruleReply](t, r), cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); r.status != http.StatusCreated || diff != "" {
			t.Errorf("POST /rules global = %d (-want +got):\n%s", r.status, diff)
		}
		// "regional" is the default, spelled out or not; approximate
		// spelled out with global is global's own.
		r = e.call(t, "POST", "/rules", c.Key, `{"name":"minute","limit":10,"window":60,"scope":"regional"}`)
		minute := ruleReply{Name: "minute", Algorithm: "sliding_window", Limit: 10, Window: win(60), Accuracy: "exact", Scope: "regional"}
		if diff := cmp.Diff(minute, decodeReply[ruleReply](t, r), cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); r.status != http.StatusCreated || diff != "" {
			t.Errorf("POST /rules regional = %d (-want +got):\n%s", r.status, diff)
		}
		r = e.call(t, "POST", "/rules", c.Key, `{"name":"search","descriptors":[{"key":"path","value":"/search"}],
			"rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":10,"window":1},{"name":"daily","limit":100000,"window":86400,"accuracy":"approximate","scope":"global"}]}`)
		wantMulti := `"rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":10,"window":1,"accuracy":"exact","scope":"regional"},` +
			`{"name":"daily","algorithm":"sliding_window","limit":100000,"window":86400,"accuracy":"approximate","scope":"global"}],`
		if r.status != http.StatusCreated || !strings.Contains(r.body, wantMulti) || strings.Count(r.body, `"scope"`) != 2 {
			t.Errorf("POST /rules with rate_limits = %d %s\nwant %s and no scope of the rule's own", r.status, r.body, wantMulti)
		}

		// PUT changes it both ways; the list and GET show every rule's.
		r = e.call(t, "PUT", "/rules/minute", c.Key, `{"algorithm":"fixed_window","limit":10,"window":60,"scope":"global"}`)
		if got := decodeReply[ruleReply](t, r); r.status != http.StatusOK || got.Scope != "global" || got.Accuracy != "approximate" {
			t.Errorf("PUT to global = %d %s", r.status, r.body)
		}
		r = e.call(t, "PUT", "/rules/tenant", c.Key, `{"algorithm":"fixed_window","limit":6000,"window":60}`)
		if got := decodeReply[ruleReply](t, r); r.status != http.StatusOK || got.Scope != "regional" || got.Accuracy != "exact" {
			t.Errorf("PUT leaving scope out = %d %s, want regional and exact", r.status, r.body)
		}
		list := e.call(t, "GET", "/rules/list", c.Key, "")
		got := decodeReply[[]ruleReply](t, list)
		if len(got) != 3 || got[0].Scope != "global" || got[1].Scope != "" || got[2].Scope != "regional" || !strings.Contains(list.body, wantMulti) {
			t.Errorf("GET /rules/list = %s", list.body)
		}
		if r := e.call(t, "POST", "/rules/minute/overrides", c.Key, `{"identifier":"acme","limit":100}`); r.status != http.StatusCreated {
			t.Errorf("POST /rules/minute/overrides (a global rule) = %d %s", r.status, r.body)
		}
	})
}

// TestRuleScopeRefused: global is approximate (exact written out is
// refused), so a window's; a scope is regional or global; a server without
// a global Redis refuses global, 400 GLOBAL_SCOPE_UNAVAILABLE; a refused
// update changes nothing. Never a 500.
func TestRuleScopeRefused(t *testing.T) {
	const exactGlobal = "scope global is decided from memory with leases of the global budget: its accuracy is approximate, not exact (an exact global limit would wait on the global Redis for every decision)"
	const unavailable = `scope "global" needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none): leave scope out for a regional limit, or ask the operator for a global Redis`
	tests := []struct {
		name, body string
		global     bool // Deps.GlobalScope
		code, msg  string
	}{
		{"exact", `{"name":"x","algorithm":"fixed_window","limit":10,"window":60,"accuracy":"exact","scope":"global"}`, true, "INVALID_FIELD", exactGlobal},
		{"token_bucket", `{"name":"x","algorithm":"token_bucket","limit":10,"refill_rate":1,"scope":"global"}`, true, "INVALID_FIELD",
			"accuracy approximate applies to fixed_window and sliding_window, not token_bucket (whose every decision must read and write the shared state)"},
		{"unknown", `{"name":"x","algorithm":"fixed_window","limit":10,"window":60,"scope":"planet"}`, true, "INVALID_FIELD", `scope "planet" is not one of regional or global`},
		{"not a string", `{"name":"x","algorithm":"fixed_window","limit":10,"window":60,"scope":1}`, true, "INVALID_FIELD", `field "scope" must be a string, not number`},
		{"exact in rate_limits", `{"name":"x","descriptors":[{"key":"k"}],"rate_limits":[{"algorithm":"fixed_window","limit":2,"window":1},{"algorithm":"fixed_window","limit":5,"window":60,"accuracy":"exact","scope":"global"}]}`,
			true, "INVALID_FIELD", "rate_limits[1]: " + exactGlobal},
		{"beside rate_limits", `{"name":"x","scope":"global","descriptors":[{"key":"k"}],"rate_limits":[{"algorithm":"fixed_window","limit":2,"window":1}]}`,
			true, "INVALID_FIELD", "give the rule's limit either in algorithm, limit, window, refill_rate, always_count, accuracy and scope, or as a list in rate_limits, not both"},
		{"no global Redis", `{"name":"x","algorithm":"fixed_window","limit":10,"window":60,"scope":"global"}`, false, "GLOBAL_SCOPE_UNAVAILABLE", unavailable},
		{"no global Redis, in rate_limits", `{"name":"x","descriptors":[{"key":"k"}],"rate_limits":[{"algorithm":"fixed_window","limit":2,"window":1},{"algorithm":"fixed_window","limit":5,"window":60,"scope":"global"}]}`,
			false, "GLOBAL_SCOPE_UNAVAILABLE", "rate_limits[1]: " + unavailable},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		envs := map[bool]*testEnv{true: newEnv(t, b, withGlobalScope), false: newEnv(t, b)}
		keys := map[bool]string{}
		for g, e := range envs {
			keys[g] = e.register(t, "scope-refused", `"default_algorithm":"fixed_window"`).Key
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := envs[tt.global].call(t, "POST", "/rules", keys[tt.global], tt.body)
				wantError(t, r, http.StatusBadRequest, tt.code)
				if got := decodeReply[errorReply](t, r).Error; got != tt.msg {
					t.Errorf("error = %q, want %q", got, tt.msg)
				}
			})
		}
		e, key := envs[false], keys[false]
		if r := e.call(t, "POST", "/rules", key, `{"name":"kept","limit":10,"window":60}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s", r.status, r.body)
		}
		r := e.call(t, "PUT", "/rules/kept", key, `{"limit":10,"window":60,"scope":"global"}`)
		wantError(t, r, http.StatusBadRequest, "GLOBAL_SCOPE_UNAVAILABLE")
		list := decodeReply[[]ruleReply](t, e.call(t, "GET", "/rules/list", key, ""))
		if len(list) != 1 || list[0].Scope != "regional" {
			t.Errorf("rules after the refusals = %+v, want only kept, regional", list)
		}
	})
}

// TestReservationIDKeepsScope: a reservation on a global limit settles on
// the same side: its id carries the scope, and a regional one's does not
// change (no "g" in it).
func TestReservationIDKeepsScope(t *testing.T) {
	c := store.Client{ID: "0b0e8f9e-6f55-4b8e-9d57-6c1f0a1a2b3c"}
	for _, global := range []bool{true, false} {
		l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 6000, Window: time.Minute, Accuracy: algorithms.Approximate, Global: global}
		id := reservationID(c, check{identifier: "acme", limit: l, counter: "rule:tenant"}, "00112233445566778899aabbccddeeff")
		s, err := parseReservationID(c, id)
		if err != nil {
			t.Fatalf("global %v: parseReservationID: %v", global, err)
		}
		if s.Request.Limit != l || s.ID != "00112233445566778899aabbccddeeff" {
			t.Errorf("global %v: settle = %+v, want the limit %+v", global, s, l)
		}
		b, _ := base64.RawURLEncoding.DecodeString(id)
		if got := strings.Contains(string(b), `"g":true`); got != global {
			t.Errorf("global %v: token %s", global, b)
		}
	}
}
