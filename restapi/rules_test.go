package restapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// TestRules: a rule is created, listed, used by /check at once, refused
// with the exact status and code when bad, and deleted. One story in steps
// over each backend, with a table of refusals in its middle, hence its
// length.
func TestRules(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "rules", `"default_algorithm":"token_bucket"`)

		r := e.call(t, "GET", "/rules/list", c.Key, "")
		if r.status != http.StatusOK || r.body != "[]\n" {
			t.Errorf("GET /rules/list with no rules = %d %q, want 200 []", r.status, r.body)
		}

		r = e.call(t, "POST", "/rules", c.Key, `{"name":"api_default","algorithm":"sliding_window","limit":100,"window":60}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s, want 201", r.status, r.body)
		}
		got := decodeReply[ruleReply](t, r)
		want := ruleReply{Name: "api_default", Algorithm: "sliding_window", Limit: 100, Window: win(60), Accuracy: "exact", Scope: "regional"}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); diff != "" {
			t.Errorf("POST /rules reply (-want +got):\n%s", diff)
		}
		if time.Since(got.CreatedAt) > time.Minute || got.CreatedAt.IsZero() {
			t.Errorf("created_at = %v, want about now", got.CreatedAt)
		}
		if strings.Contains(r.body, "refill_rate") || strings.Contains(r.body, "descriptors") {
			t.Errorf("reply shows unset fields: %s", r.body)
		}

		// Descriptors round-trip; the algorithm defaults to the client's.
		r = e.call(t, "POST", "/rules", c.Key, `{"name":"edge.login","limit":5,"refill_rate":0.25,"descriptors":[{"key":"path","value":"/login"},{"key":"user"}]}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /rules with descriptors = %d %s", r.status, r.body)
		}
		wantDesc := ruleReply{Name: "edge.login", Algorithm: "token_bucket", Limit: 5, Window: win(0), RefillRate: 0.25, Accuracy: "exact", Scope: "regional",
			Descriptors: []store.DescriptorEntry{{Key: "path", Value: "/login"}, {Key: "user"}}}
		if diff := cmp.Diff(wantDesc, decodeReply[ruleReply](t, r), cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); diff != "" {
			t.Errorf("POST /rules with descriptors (-want +got):\n%s", diff)
		}

		r = e.call(t, "GET", "/rules/list", c.Key, "")
		list := decodeReply[[]ruleReply](t, r)
		if diff := cmp.Diff([]ruleReply{want, wantDesc}, list, cmpopts.IgnoreFields(ruleReply{}, "CreatedAt")); diff != "" {
			t.Errorf("GET /rules/list, by name (-want +got):\n%s", diff)
		}

		// The rule works on /check at once (the cache was refreshed).
		got2, _ := e.check(t, c, `{"identifier":"u","rule":"api_default"}`)
		if got2.Limit != 100 || got2.Algorithm != "sliding_window" || got2.Remaining != 99 {
			t.Errorf("check with rule = %+v, want limit 100 sliding_window remaining 99", got2)
		}

		for _, tt := range []struct {
			name, body string
			status     int
			code       string
		}{
			{"duplicate", `{"name":"api_default","algorithm":"fixed_window","limit":1,"window":1}`, 409, "RULE_EXISTS"},
			{"missing name", `{"algorithm":"fixed_window","limit":1,"window":1}`, 400, "MISSING_FIELD"},
			{"bad name", `{"name":"has space","algorithm":"fixed_window","limit":1,"window":1}`, 400, "INVALID_FIELD"},
			{"bad algorithm", `{"name":"x","algorithm":"leaky","limit":1,"window":1}`, 400, "INVALID_FIELD"},
			{"missing limit", `{"name":"x","algorithm":"fixed_window","window":1}`, 400, "MISSING_FIELD"},
			{"zero limit", `{"name":"x","algorithm":"fixed_window","limit":0,"window":1}`, 400, "INVALID_FIELD"},
			{"missing window", `{"name":"x","algorithm":"fixed_window","limit":1}`, 400, "MISSING_FIELD"},
			{"negative window", `{"name":"x","algorithm":"fixed_window","limit":1,"window":-5}`, 400, "INVALID_FIELD"},
			{"gcra without window", `{"name":"x","algorithm":"gcra","limit":1}`, 400, "MISSING_FIELD"},
			{"gcra too fine", `{"name":"x","algorithm":"gcra","limit":999999937,"window":31622400}`, 400, "INVALID_FIELD"},
			{"descriptor without key", `{"name":"x","algorithm":"fixed_window","limit":1,"window":1,"descriptors":[{"value":"v"}]}`, 400, "INVALID_FIELD"},
			{"descriptor typo", `{"name":"x","algorithm":"fixed_window","limit":1,"window":1,"descriptors":[{"key":"k","vaule":"v"}]}`, 400, "UNKNOWN_FIELD"},
			{"same descriptors as edge.login", `{"name":"x","algorithm":"fixed_window","limit":9,"window":60,"descriptors":[{"key":"path","value":"/login"},{"key":"user"}]}`, 409, "DESCRIPTORS_EXIST"},
			{"descriptor rule above Envoy's uint32", `{"name":"x","algorithm":"fixed_window","limit":4294967296,"window":60,"descriptors":[{"key":"k"}]}`, 400, "INVALID_FIELD"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				wantError(t, e.call(t, "POST", "/rules", c.Key, tt.body), tt.status, tt.code)
			})
		}

		r = e.call(t, "DELETE", "/rules/api_default", c.Key, "")
		if r.status != http.StatusOK || strings.TrimSpace(r.body) != `{"message":"Rule deleted successfully","name":"api_default"}` {
			t.Errorf("DELETE /rules/api_default = %d %s", r.status, r.body)
		}
		wantError(t, e.call(t, "DELETE", "/rules/api_default", c.Key, ""), 404, "RULE_NOT_FOUND")
		wantError(t, e.call(t, "POST", "/check", c.Key, `{"identifier":"u","rule":"api_default"}`), 404, "RULE_NOT_FOUND")
		if list := decodeReply[[]ruleReply](t, e.call(t, "GET", "/rules/list", c.Key, "")); len(list) != 1 || list[0].Name != "edge.login" {
			t.Errorf("GET /rules/list after delete = %+v, want only edge.login", list)
		}
	})
}

// TestRuleUpdate: PUT /rules/{name} replaces a rule, keeps its name and
// creation time, and takes effect on /check at once.
func TestRuleUpdate(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "rule-update", `"default_algorithm":"sliding_window"`)
		r := e.call(t, "POST", "/rules", c.Key, `{"name":"api","algorithm":"fixed_window","limit":2,"window":60}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s", r.status, r.body)
		}
		created := decodeReply[ruleReply](t, r)
		if _, err := e.db.CreateRule(t.Context(), store.Rule{ClientID: c.ID, Name: "edge", Limit: algorithms.Limit{Algorithm: "fixed_window", Limit: 1, Window: time.Minute},
			Descriptors: []store.DescriptorEntry{{Key: "path", Value: "/login"}}}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			e.check(t, c, `{"identifier":"u","rule":"api"}`)
		}
		if got, _ := e.check(t, c, `{"identifier":"u","rule":"api"}`); got.Allowed {
			t.Fatalf("third check under limit 2 = %+v, want rejected", got)
		}

		// Same algorithm, higher limit: the counter is kept (2 used of 5).
		r = e.call(t, "PUT", "/rules/api", c.Key, `{"algorithm":"fixed_window","limit":5,"window":60}`)
		if r.status != http.StatusOK {
			t.Fatalf("PUT /rules/api = %d %s, want 200", r.status, r.body)
		}
		want := ruleReply{Name: "api", Algorithm: "fixed_window", Limit: 5, Window: win(60), Accuracy: "exact", Scope: "regional", CreatedAt: created.CreatedAt}
		if diff := cmp.Diff(want, decodeReply[ruleReply](t, r)); diff != "" {
			t.Errorf("PUT /rules/api reply (-want +got):\n%s", diff)
		}
		if got, _ := e.check(t, c, `{"identifier":"u","rule":"api"}`); !got.Allowed || got.Limit != 5 || got.Remaining != 2 {
			t.Errorf("check after raising the limit = %+v, want allowed, limit 5, remaining 2", got)
		}

		// Fields left out take their defaults; the body may repeat the name.
		r = e.call(t, "PUT", "/rules/api", c.Key, `{"name":"api","limit":10,"window":3600,"descriptors":[{"key":"user_id"}]}`)
		want = ruleReply{Name: "api", Algorithm: "sliding_window", Limit: 10, Window: win(3600), Accuracy: "exact", Scope: "regional",
			Descriptors: []store.DescriptorEntry{{Key: "user_id"}}, CreatedAt: created.CreatedAt}
		if diff := cmp.Diff(want, decodeReply[ruleReply](t, r)); r.status != http.StatusOK || diff != "" {
			t.Errorf("PUT /rules/api with defaults = %d (-want +got):\n%s", r.status, diff)
		}
		list := decodeReply[[]ruleReply](t, e.call(t, "GET", "/rules/list", c.Key, ""))
		if len(list) != 2 || !cmp.Equal(want, list[0]) {
			t.Errorf("GET /rules/list after PUT = %+v, want %+v first", list, want)
		}

		for _, tt := range []struct {
			name, path, body string
			status           int
			code             string
		}{
			{"unknown rule", "/rules/nope", `{"algorithm":"fixed_window","limit":1,"window":60}`, 404, "RULE_NOT_FOUND"},
			{"rename", "/rules/api", `{"name":"other","algorithm":"fixed_window","limit":1,"window":60}`, 400, "INVALID_FIELD"},
			{"missing limit", "/rules/api", `{"algorithm":"fixed_window","window":60}`, 400, "MISSING_FIELD"},
			{"bad algorithm", "/rules/api", `{"algorithm":"leaky","limit":1,"window":60}`, 400, "INVALID_FIELD"},
			{"typo", "/rules/api", `{"algorithm":"fixed_window","limit":1,"windwo":60}`, 400, "UNKNOWN_FIELD"},
			{"empty body", "/rules/api", ``, 400, "INVALID_JSON"},
			{"descriptors of another rule", "/rules/api", `{"algorithm":"fixed_window","limit":1,"window":60,"descriptors":[{"key":"path","value":"/login"}]}`, 409, "DESCRIPTORS_EXIST"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				wantError(t, e.call(t, "PUT", tt.path, c.Key, tt.body), tt.status, tt.code)
			})
		}
		// The refused updates changed nothing.
		if got := decodeReply[[]ruleReply](t, e.call(t, "GET", "/rules/list", c.Key, "")); !cmp.Equal(want, got[0]) {
			t.Errorf("rule after refused updates = %+v, want %+v", got[0], want)
		}
	})
}

func TestExemptions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "exemptions")
		r := e.call(t, "GET", "/exemptions/list", c.Key, "")
		if r.status != http.StatusOK || r.body != "[]\n" {
			t.Errorf("GET /exemptions/list with none = %d %q, want 200 []", r.status, r.body)
		}
		r = e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"internal-service","reason":"Internal microservice, no rate limiting needed"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /exemptions = %d %s", r.status, r.body)
		}
		got := decodeReply[exemptionReply](t, r)
		if got.Identifier != "internal-service" || got.Reason != "Internal microservice, no rate limiting needed" || got.CreatedAt.IsZero() {
			t.Errorf("POST /exemptions = %+v", got)
		}
		r = e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"team/bots"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /exemptions team/bots = %d %s", r.status, r.body)
		}
		wantError(t, e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"internal-service"}`), 409, "EXEMPTION_EXISTS")
		wantError(t, e.call(t, "POST", "/exemptions", c.Key, `{"reason":"x"}`), 400, "MISSING_FIELD")
		wantError(t, e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"`+strings.Repeat("x", 257)+`"}`), 400, "INVALID_FIELD")

		list := decodeReply[[]exemptionReply](t, e.call(t, "GET", "/exemptions/list", c.Key, ""))
		if len(list) != 2 || list[0].Identifier != "internal-service" || list[1].Identifier != "team/bots" {
			t.Errorf("GET /exemptions/list = %+v, want internal-service, team/bots", list)
		}

		for _, path := range []string{"/exemptions/team%2Fbots", "/exemptions/internal-service"} {
			r = e.call(t, "DELETE", path, c.Key, "")
			if r.status != http.StatusOK || !strings.Contains(r.body, `"message":"Exemption removed successfully"`) {
				t.Errorf("DELETE %s = %d %s", path, r.status, r.body)
			}
		}
		wantError(t, e.call(t, "DELETE", "/exemptions/internal-service", c.Key, ""), 404, "EXEMPTION_NOT_FOUND")
		if r := e.call(t, "GET", "/exemptions/list", c.Key, ""); r.body != "[]\n" {
			t.Errorf("GET /exemptions/list after deleting all = %s, want []", r.body)
		}
	})
}

func TestStats(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "stats")
		r := e.call(t, "GET", "/stats/"+c.ID, c.Key, "")
		want := `{"client_id":"` + c.ID + `","total_checks":0,"allowed":0,"rejected":0,"by_algorithm":{"fixed_window":0,"gcra":0,"sliding_window":0,"token_bucket":0},"top_identifiers":[],"reservations":{"outstanding":0,"counters":[]}}`
		if r.status != http.StatusOK || strings.TrimSpace(r.body) != want {
			t.Errorf("GET /stats with no checks = %d %s, want %s", r.status, r.body, want)
		}
		for range 3 {
			e.check(t, c, `{"identifier":"u","limit":2,"window":60,"algorithm":"fixed_window"}`)
		}
		e.check(t, c, `{"identifier":"u","limit":2,"algorithm":"token_bucket"}`)
		e.check(t, c, `{"identifier":"v","limit":2,"algorithm":"token_bucket"}`)
		if r := e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"vip"}`); r.status != http.StatusCreated {
			t.Fatalf("POST /exemptions = %d %s", r.status, r.body)
		}
		for range 2 {
			e.check(t, c, `{"identifier":"vip","limit":1,"window":60,"algorithm":"fixed_window"}`)
		}
		wantStats := usageReply{
			ClientID: c.ID, TotalChecks: 7, Allowed: 6, Rejected: 1,
			ByAlgorithm: map[string]int64{"fixed_window": 5, "gcra": 0, "sliding_window": 0, "token_bucket": 2},
			TopIdentifiers: []identifierUsage{
				{Identifier: "u", TotalChecks: 4, Allowed: 3, Rejected: 1},
				{Identifier: "vip", TotalChecks: 2, Allowed: 2},
				{Identifier: "v", TotalChecks: 1, Allowed: 1},
			},
			Reservations: &reservationUsage{Counters: []heldCounterUsage{}},
		}
		stats := func(when, query string, want usageReply) {
			t.Helper()
			r := e.call(t, "GET", "/stats/"+c.ID+query, c.Key, "")
			if r.status != http.StatusOK {
				t.Fatalf("%s: GET /stats%s = %d %s", when, query, r.status, r.body)
			}
			got := decodeReply[usageReply](t, r)
			for _, id := range got.TopIdentifiers {
				if time.Since(id.LastSeenAt) > time.Minute || id.LastSeenAt.After(time.Now()) {
					t.Errorf("%s: %s last seen at %v, want about now", when, id.Identifier, id.LastSeenAt)
				}
			}
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(identifierUsage{}, "LastSeenAt")); diff != "" {
				t.Errorf("%s: GET /stats%s (-want +got):\n%s", when, query, diff)
			}
		}
		stats("before a flush", "", wantStats)
		// A flush to the database changes nothing the client sees.
		if err := e.usage.Flush(t.Context()); err != nil {
			t.Fatalf("flush usage: %v", err)
		}
		stats("after a flush", "", wantStats)
		top1 := wantStats
		top1.TopIdentifiers = wantStats.TopIdentifiers[:1]
		stats("top 1", "?top=1", top1)
		top0 := wantStats
		top0.TopIdentifiers = []identifierUsage{}
		stats("top 0", "?top=0", top0)
		for _, q := range []string{"?top=-1", "?top=101", "?top=ten", "?top="} {
			wantError(t, e.call(t, "GET", "/stats/"+c.ID+q, c.Key, ""), 400, "INVALID_FIELD")
		}
	})
}

// TestTenantIsolation: client B cannot see, use, delete or reset what
// client A owns, even knowing its names.
func TestTenantIsolation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		a := e.register(t, "tenant-a")
		bb := e.register(t, "tenant-b")
		for _, req := range []struct{ path, body string }{
			{"/rules", `{"name":"shared","algorithm":"fixed_window","limit":1,"window":60}`},
			{"/exemptions", `{"identifier":"vip"}`},
		} {
			if r := e.call(t, "POST", req.path, a.Key, req.body); r.status != http.StatusCreated {
				t.Fatalf("A: POST %s = %d %s", req.path, r.status, r.body)
			}
		}
		if got, _ := e.check(t, a, `{"identifier":"u","rule":"shared"}`); !got.Allowed {
			t.Fatalf("A's first check = %+v, want allowed", got)
		}

		if r := e.call(t, "GET", "/rules/list", bb.Key, ""); r.body != "[]\n" {
			t.Errorf("B lists rules: %s, want []", r.body)
		}
		if r := e.call(t, "GET", "/exemptions/list", bb.Key, ""); r.body != "[]\n" {
			t.Errorf("B lists exemptions: %s, want []", r.body)
		}
		wantError(t, e.call(t, "POST", "/check", bb.Key, `{"identifier":"u","rule":"shared"}`), 404, "RULE_NOT_FOUND")
		wantError(t, e.call(t, "DELETE", "/rules/shared", bb.Key, ""), 404, "RULE_NOT_FOUND")
		wantError(t, e.call(t, "PUT", "/rules/shared", bb.Key, `{"algorithm":"fixed_window","limit":100,"window":60}`), 404, "RULE_NOT_FOUND")
		wantError(t, e.call(t, "DELETE", "/exemptions/vip", bb.Key, ""), 404, "EXEMPTION_NOT_FOUND")
		wantError(t, e.call(t, "GET", "/stats/"+a.ID, bb.Key, ""), 403, "FORBIDDEN")
		if got, _ := e.check(t, bb, `{"identifier":"vip","limit":1,"window":60}`); got.Exempted {
			t.Errorf("B's vip is exempt by A's exemption: %+v", got)
		}
		r := e.call(t, "POST", "/reset", bb.Key, `{"identifier":"u"}`)
		if got := decodeReply[resetReply](t, r); got.KeysDeleted != 0 {
			t.Errorf("B resets u: keys_deleted %d, want 0", got.KeysDeleted)
		}
		// B's counter for u is its own, and A's is untouched by B's reset.
		if got, _ := e.check(t, bb, `{"identifier":"u","limit":1,"window":60,"algorithm":"fixed_window"}`); !got.Allowed {
			t.Errorf("B's first check of u = %+v, want allowed", got)
		}
		if got, _ := e.check(t, a, `{"identifier":"u","rule":"shared"}`); got.Allowed {
			t.Errorf("A's second check = %+v, want rejected (limit 1)", got)
		}

		// A still has everything.
		if list := decodeReply[[]ruleReply](t, e.call(t, "GET", "/rules/list", a.Key, "")); len(list) != 1 {
			t.Errorf("A's rules = %+v, want 1", list)
		}
		if got, _ := e.check(t, a, `{"identifier":"vip","limit":1,"window":60}`); !got.Exempted {
			t.Errorf("A's vip not exempt: %+v", got)
		}
		stats := decodeReply[usageReply](t, e.call(t, "GET", "/stats/"+a.ID, a.Key, ""))
		if stats.TotalChecks != 3 {
			t.Errorf("A's stats = %+v, want 3 checks", stats)
		}
	})
}

// win is a rule reply's window of s seconds.
func win(s int64) *int64 { return &s }

// TestRuleRateLimits: a rule with descriptors may carry several limits
// (rate_limits) or one that always counts (always_count); the JSON of a
// rule of one limit is unchanged.
func TestRuleRateLimits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "rate-limits", `"default_algorithm":"sliding_window"`)
		r := e.call(t, "POST", "/rules", c.Key, `{"name":"login","descriptors":[{"key":"path","value":"/login"},{"key":"user"}],
			"rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":5,"window":60},{"limit":100,"window":86400,"always_count":true}]}`)
		want := `{"name":"login","rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":5,"window":60,"accuracy":"exact","scope":"regional"},` +
			`{"algorithm":"sliding_window","limit":100,"window":86400,"always_count":true,"accuracy":"exact","scope":"regional"}],` +
			`"descriptors":[{"key":"path","value":"/login"},{"key":"user"}],"created_at":"`
		if r.status != http.StatusCreated || !strings.HasPrefix(r.body, want) {
			t.Fatalf("POST /rules with rate_limits = %d %s\nwant %s…", r.status, r.body, want)
		}
		r = e.call(t, "POST", "/rules", c.Key, `{"name":"tokens","algorithm":"fixed_window","limit":1000,"window":60,"always_count":true,"descriptors":[{"key":"tenant"}]}`)
		if want := `{"name":"tokens","algorithm":"fixed_window","limit":1000,"window":60,"always_count":true,"accuracy":"exact","scope":"regional","descriptors":[{"key":"tenant"}],"created_at":"`; r.status != http.StatusCreated || !strings.HasPrefix(r.body, want) {
			t.Fatalf("POST /rules with always_count = %d %s\nwant %s…", r.status, r.body, want)
		}
		list := e.call(t, "GET", "/rules/list", c.Key, "")
		if !strings.Contains(list.body, `"rate_limits":[{"name":"burst"`) || !strings.Contains(list.body, `"always_count":true,"accuracy":"exact","scope":"regional","descriptors":[{"key":"tenant"}]`) {
			t.Errorf("GET /rules/list = %s", list.body)
		}

		// Back to one limit with PUT.
		r = e.call(t, "PUT", "/rules/login", c.Key, `{"algorithm":"gcra","limit":3,"window":1,"descriptors":[{"key":"path","value":"/login"},{"key":"user"}]}`)
		if r.status != http.StatusOK || strings.Contains(r.body, "rate_limits") || !strings.Contains(r.body, `"algorithm":"gcra","limit":3,"window":1`) {
			t.Errorf("PUT back to one limit = %d %s", r.status, r.body)
		}

		for _, tt := range []struct {
			name, body string
			status     int
			code, msg  string
		}{
			{"both forms", `{"name":"x","limit":1,"window":1,"rate_limits":[{"limit":2,"window":1}],"descriptors":[{"key":"k"}]}`, 400, "INVALID_FIELD",
				"give the rule's limit either in algorithm, limit, window, refill_rate, always_count, accuracy and scope, or as a list in rate_limits, not both"},
			{"always_count with the list", `{"name":"x","always_count":true,"rate_limits":[{"limit":2,"window":1}],"descriptors":[{"key":"k"}]}`, 400, "INVALID_FIELD",
				"give the rule's limit either in algorithm, limit, window, refill_rate, always_count, accuracy and scope, or as a list in rate_limits, not both"},
			{"empty list", `{"name":"x","rate_limits":[],"descriptors":[{"key":"k"}]}`, 400, "INVALID_FIELD", "rate_limits must list at least one limit"},
			{"without descriptors", `{"name":"x","rate_limits":[{"limit":2,"window":1}]}`, 400, "INVALID_FIELD",
				"rate_limits is only for rules with descriptors (Envoy requests); a rule for /check has one limit"},
			{"element without window", `{"name":"x","rate_limits":[{"limit":2,"window":1},{"algorithm":"gcra","limit":2}],"descriptors":[{"key":"k"}]}`, 400, "MISSING_FIELD",
				"rate_limits[1]: window (seconds) is required for gcra"},
			{"element limit refused by the engine", `{"name":"x","rate_limits":[{"algorithm":"gcra","limit":999999937,"window":31622400}],"descriptors":[{"key":"k"}]}`, 400, "INVALID_FIELD",
				"rate_limits[0]: gcra cannot count limit 999999937 per 366 days exactly (the least common multiple of the limit and the window in µs must be below 2^53): choose a rounder limit or window"},
			{"two sharing a counter", `{"name":"x","rate_limits":[{"limit":2,"window":1},{"name":"b","limit":2,"window":1}],"descriptors":[{"key":"k"}]}`, 400, "INVALID_FIELD",
				"rate_limits[1]: same algorithm, limit, window and refill_rate as rate_limits[0]: the two would count against one counter"},
			{"typo in an element", `{"name":"x","rate_limits":[{"limit":2,"windwo":1}],"descriptors":[{"key":"k"}]}`, 400, "UNKNOWN_FIELD", `unknown field "windwo"`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := e.call(t, "POST", "/rules", c.Key, tt.body)
				wantError(t, r, tt.status, tt.code)
				if got := decodeReply[errorReply](t, r).Error; got != tt.msg {
					t.Errorf("error = %q, want %q", got, tt.msg)
				}
			})
		}

		// /check takes a rule of one limit only.
		e.call(t, "POST", "/rules", c.Key, `{"name":"multi","rate_limits":[{"limit":2,"window":1},{"limit":5,"window":60}],"descriptors":[{"key":"m"}]}`)
		r = e.call(t, "POST", "/check", c.Key, `{"identifier":"u","rule":"multi"}`)
		wantError(t, r, 400, "INVALID_FIELD")
		if got := decodeReply[errorReply](t, r).Error; got != `rule "multi" has several limits (rate_limits): it limits Envoy requests only` {
			t.Errorf("/check with a rule of several limits: %q", got)
		}
	})
}

// TestCheckAlwaysCount: /check with a rule that always counts charges a
// cost larger than what is left, and the next check is refused until the
// window ends.
func TestCheckAlwaysCount(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "always-count")
		if r := e.call(t, "POST", "/rules", c.Key, `{"name":"tokens","algorithm":"fixed_window","limit":300,"window":60,"always_count":true}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s", r.status, r.body)
		}
		if got, _ := e.check(t, c, `{"identifier":"acme","rule":"tokens","hits":200}`); !got.Allowed || got.Remaining != 100 {
			t.Errorf("charge of 200 = %+v, want allowed, 100 left", got)
		}
		if got, _ := e.check(t, c, `{"identifier":"acme","rule":"tokens","hits":500}`); got.Allowed || got.Remaining != 0 {
			t.Errorf("charge of 500 with 100 left = %+v, want not allowed (and counted)", got)
		}
		if got, _ := e.check(t, c, `{"identifier":"acme","rule":"tokens","hits":0}`); got.Allowed {
			t.Errorf("check of 0 after going over = %+v, want refused until the window ends", got)
		}
	})
}
