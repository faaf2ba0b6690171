package restapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRuleAccuracy: a rule's accuracy (exact by default, or approximate)
// is taken on create and update, for its one limit and for each of its
// rate_limits, shown in every reply and the list, and carried into /check
// (the approximate engine decides, as the metrics say), overrides
// included.
func TestRuleAccuracy(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "accuracy", `"default_algorithm":"sliding_window"`)
		r := e.call(t, "POST", "/rules", c.Key, `{"name":"hourly","algorithm":"fixed_window","limit":640,"window":3600,"accuracy":"approximate"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /rules approximate = %d %s", r.status, r.body)
		}
		hourly := ruleReply{Name: "hourly", Algorithm: "fixed_window", Limit: 640, Window: win(3600), Accuracy: "approximate", Scope: "regional"}
		if diff := cmp.Diff(hourly, decodeReply[ruleReply](t, r), cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); diff != "" {
			t.Errorf("POST /rules approximate (-want +got):\n%s", diff)
		}
		// "exact" is the default, spelled out or not; the algorithm the client's.
		r = e.call(t, "POST", "/rules", c.Key, `{"name":"minute","limit":10,"window":60,"accuracy":"exact"}`)
		minute := ruleReply{Name: "minute", Algorithm: "sliding_window", Limit: 10, Window: win(60), Accuracy: "exact", Scope: "regional"}
		if diff := cmp.Diff(minute, decodeReply[ruleReply](t, r), cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); r.status != http.StatusCreated || diff != "" {
			t.Errorf("POST /rules exact = %d (-want +got):\n%s", r.status, diff)
		}
		r = e.call(t, "POST", "/rules", c.Key, `{"name":"search","descriptors":[{"key":"path","value":"/search"}],
			"rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":10,"window":1},{"name":"daily","limit":100000,"window":86400,"accuracy":"approximate"}]}`)
		wantMulti := `"rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":10,"window":1,"accuracy":"exact","scope":"regional"},` +
			`{"name":"daily","algorithm":"sliding_window","limit":100000,"window":86400,"accuracy":"approximate","scope":"regional"}],`
		if r.status != http.StatusCreated || !strings.Contains(r.body, wantMulti) || strings.Contains(r.body, `"algorithm":"sliding_window","accuracy"`) {
			t.Errorf("POST /rules with rate_limits = %d %s\nwant %s and no accuracy of the rule's own", r.status, r.body, wantMulti)
		}

		// PUT changes it both ways; the list shows every rule's.
		r = e.call(t, "PUT", "/rules/minute", c.Key, `{"limit":10,"window":60,"accuracy":"approximate"}`)
		if got := decodeReply[ruleReply](t, r); r.status != http.StatusOK || got.Accuracy != "approximate" {
			t.Errorf("PUT to approximate = %d %s", r.status, r.body)
		}
		r = e.call(t, "PUT", "/rules/minute", c.Key, `{"limit":10,"window":60}`)
		if got := decodeReply[ruleReply](t, r); r.status != http.StatusOK || got.Accuracy != "exact" {
			t.Errorf("PUT leaving accuracy out = %d %s, want exact", r.status, r.body)
		}
		list := e.call(t, "GET", "/rules/list", c.Key, "")
		got := decodeReply[[]ruleReply](t, list)
		if len(got) != 3 || got[0].Accuracy != "approximate" || got[1].Accuracy != "exact" || got[2].Accuracy != "" ||
			!strings.Contains(list.body, wantMulti) {
			t.Errorf("GET /rules/list = %s", list.body)
		}

		// /check through the approximate rule, and through its override.
		const n = 7
		for range n {
			if got, _ := e.check(t, c, `{"identifier":"u","rule":"hourly"}`); !got.Allowed || got.Limit != 640 || got.Algorithm != "fixed_window" {
				t.Fatalf("check with the approximate rule = %+v", got)
			}
		}
		if r := e.call(t, "POST", "/rules/hourly/overrides", c.Key, `{"identifier":"acme","limit":6400}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules/hourly/overrides = %d %s", r.status, r.body)
		}
		if got, _ := e.check(t, c, `{"identifier":"acme","rule":"hourly"}`); !got.Allowed || got.Limit != 6400 || got.Override != "acme" {
			t.Errorf("check with the override = %+v", got)
		}
		e.check(t, c, `{"identifier":"u","rule":"minute"}`)
		approx := map[string]string{"api": "rest", "algorithm": "fixed_window", "accuracy": "approximate", "outcome": "allowed"}
		if got := counterValue(t, e.reg, "throttle_decisions_total", approx); got != n+1 {
			t.Errorf("throttle_decisions_total%v = %v, want %d", approx, got, n+1)
		}
		exact := map[string]string{"algorithm": "sliding_window", "accuracy": "exact"}
		if got := counterValue(t, e.reg, "throttle_decisions_total", exact); got != 1 {
			t.Errorf("throttle_decisions_total%v = %v, want 1", exact, got)
		}
		if b.limiter == "redis" {
			// The Redis store decided them from memory.
			if got := counterValue(t, e.reg, "throttle_redis_decisions_total", map[string]string{"accuracy": "approximate"}); got != n+1 {
				t.Errorf("throttle_redis_decisions_total{accuracy=approximate} = %v, want %d", got, n+1)
			}
		}
	})
}

// TestRuleAccuracyRefused: approximate is for the window algorithms, with
// the engine's reason; an accuracy is exact or approximate; a refused
// update changes nothing.
func TestRuleAccuracyRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "accuracy-refused", `"default_algorithm":"token_bucket"`)
		engine := func(alg string) string {
			return "accuracy approximate applies to fixed_window and sliding_window, not " + alg + " (whose every decision must read and write the shared state)"
		}
		for _, tt := range []struct {
			name, body string
			code, msg  string
		}{
			{"token_bucket", `{"name":"x","algorithm":"token_bucket","limit":10,"refill_rate":1,"accuracy":"approximate"}`, "INVALID_FIELD", engine("token_bucket")},
			{"gcra", `{"name":"x","algorithm":"gcra","limit":10,"window":60,"accuracy":"approximate"}`, "INVALID_FIELD", engine("gcra")},
			{"the client's token_bucket", `{"name":"x","limit":10,"window":60,"accuracy":"approximate"}`, "INVALID_FIELD", engine("token_bucket")},
			{"unknown", `{"name":"x","algorithm":"fixed_window","limit":10,"window":60,"accuracy":"rough"}`, "INVALID_FIELD", `accuracy "rough" is not one of exact or approximate`},
			{"not a string", `{"name":"x","algorithm":"fixed_window","limit":10,"window":60,"accuracy":true}`, "INVALID_FIELD", `field "accuracy" must be a string, not bool`},
			{"in rate_limits", `{"name":"x","descriptors":[{"key":"k"}],"rate_limits":[{"algorithm":"fixed_window","limit":2,"window":1},{"algorithm":"gcra","limit":5,"window":60,"accuracy":"approximate"}]}`,
				"INVALID_FIELD", "rate_limits[1]: " + engine("gcra")},
			{"beside rate_limits", `{"name":"x","accuracy":"approximate","descriptors":[{"key":"k"}],"rate_limits":[{"algorithm":"fixed_window","limit":2,"window":1}]}`,
				"INVALID_FIELD", "give the rule's limit either in algorithm, limit, window, refill_rate, always_count, accuracy and scope, or as a list in rate_limits, not both"},
			{"one counter, two accuracies", `{"name":"x","descriptors":[{"key":"k"}],"rate_limits":[{"algorithm":"fixed_window","limit":2,"window":1},{"algorithm":"fixed_window","limit":2,"window":1,"accuracy":"approximate"}]}`,
				"INVALID_FIELD", "rate_limits[1]: same algorithm, limit, window and refill_rate as rate_limits[0]: the two would count against one counter"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := e.call(t, "POST", "/rules", c.Key, tt.body)
				wantError(t, r, http.StatusBadRequest, tt.code)
				if got := decodeReply[errorReply](t, r).Error; got != tt.msg {
					t.Errorf("error = %q, want %q", got, tt.msg)
				}
			})
		}
		if r := e.call(t, "POST", "/rules", c.Key, `{"name":"kept","algorithm":"sliding_window","limit":10,"window":60,"accuracy":"approximate"}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s", r.status, r.body)
		}
		r := e.call(t, "PUT", "/rules/kept", c.Key, `{"algorithm":"token_bucket","limit":10,"accuracy":"approximate"}`)
		wantError(t, r, http.StatusBadRequest, "INVALID_FIELD")
		if got := decodeReply[errorReply](t, r).Error; got != engine("token_bucket") {
			t.Errorf("PUT error = %q", got)
		}
		list := decodeReply[[]ruleReply](t, e.call(t, "GET", "/rules/list", c.Key, ""))
		if len(list) != 1 || list[0].Algorithm != "sliding_window" || list[0].Accuracy != "approximate" {
			t.Errorf("rules after the refusals = %+v, want only kept, sliding_window approximate", list)
		}
	})
}
