package restapi

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestOverrides(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "overrides")
		if r := e.call(t, "POST", "/rules", c.Key, `{"name":"api","algorithm":"fixed_window","limit":3,"window":60}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules: %d %s", r.status, r.body)
		}
		for _, o := range []string{
			`{"identifier":"acme","limit":5}`, `{"identifier":"acme-eu*","limit":4}`, `{"identifier":"ac*","limit":2}`,
			`{"identifier":"slow","limit":7,"window":3600}`,
		} {
			if r := e.call(t, "POST", "/rules/api/overrides", c.Key, o); r.status != http.StatusCreated {
				t.Fatalf("POST /rules/api/overrides %s: %d %s", o, r.status, r.body)
			}
		}
		for _, tt := range []struct {
			identifier, override string
			limit                int64
		}{
			{"acme", "acme", 5}, {"acme-eu-1", "acme-eu*", 4}, {"acme-us", "ac*", 2}, {"ac", "ac*", 2}, {"bob", "", 3}, {"slow", "slow", 7},
		} {
			got, r := e.check(t, c, `{"identifier":"`+tt.identifier+`","rule":"api"}`)
			if got.Limit != tt.limit || got.Override != tt.override || got.Remaining != tt.limit-1 || r.header.Get("X-RateLimit-Limit") != itoa(tt.limit) {
				t.Errorf("%s: limit %d override %q remaining %d (header %s); want %d, %q, %d", tt.identifier, got.Limit, got.Override,
					got.Remaining, r.header.Get("X-RateLimit-Limit"), tt.limit, tt.override, tt.limit-1)
			}
		}
		got, _ := e.check(t, c, `{"identifier":"slow","rule":"api","hits":0}`)
		if want := testNow.Truncate(time.Hour).Add(time.Hour).Unix(); got.ResetAt != want {
			t.Errorf("slow's reset_at %d, want %d: the end of its hour window", got.ResetAt, want)
		}
		// Replacing keeps the identifier's counter.
		if r := e.call(t, "POST", "/rules/api/overrides", c.Key, `{"identifier":"acme","limit":6}`); r.status != http.StatusOK {
			t.Errorf("replace: %d %s, want 200", r.status, r.body)
		}
		if got, _ := e.check(t, c, `{"identifier":"acme","rule":"api"}`); got.Limit != 6 || got.Remaining != 4 {
			t.Errorf("acme after the replacement: limit %d remaining %d, want 6 and 4 (2 used)", got.Limit, got.Remaining)
		}
		list := decodeReply[[]overrideReply](t, e.call(t, "GET", "/rules/api/overrides", c.Key, ""))
		if len(list) != 4 || list[0].Identifier != "ac*" || list[3].Identifier != "slow" || list[3].Window != 3600 {
			t.Errorf("list = %+v", list)
		}
		if r := e.call(t, "DELETE", "/rules/api/overrides/acme-eu%2A", c.Key, ""); r.status != http.StatusOK {
			t.Errorf("DELETE acme-eu*: %d %s", r.status, r.body)
		}
		if got, _ := e.check(t, c, `{"identifier":"acme-eu-2","rule":"api"}`); got.Override != "ac*" {
			t.Errorf("acme-eu-2 after deleting acme-eu*: override %q, want ac*", got.Override)
		}
		// A batch names the override too.
		if got, _ := e.batch(t, c, `{"identifier":"acme","rule":"api"}`); got.Results[0].Override != "acme" {
			t.Errorf("batch: %+v", got)
		}
	})
}

func TestOverrideRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "overridebad")
	e.call(t, "POST", "/rules", c.Key, `{"name":"api","algorithm":"fixed_window","limit":3,"window":60}`)
	e.call(t, "POST", "/rules", c.Key, `{"name":"multi","descriptors":[{"key":"k"}],"rate_limits":[{"limit":1,"window":1},{"limit":9,"window":60}]}`)
	for _, tt := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/rules/nope/overrides", `{"identifier":"a","limit":5}`, 404, "RULE_NOT_FOUND"},
		{"/rules/api/overrides", `{"identifier":"a"}`, 400, "MISSING_FIELD"},
		{"/rules/api/overrides", `{"limit":5}`, 400, "MISSING_FIELD"},
		{"/rules/api/overrides", `{"identifier":"a","limit":0}`, 400, "INVALID_FIELD"},
		{"/rules/api/overrides", `{"identifier":"a","limit":5,"window":0}`, 400, "INVALID_FIELD"},
		{"/rules/multi/overrides", `{"identifier":"a","limit":5}`, 400, "INVALID_FIELD"},
	} {
		wantError(t, e.call(t, "POST", tt.path, c.Key, tt.body), tt.status, tt.code)
	}
	wantError(t, e.call(t, "DELETE", "/rules/api/overrides/none", c.Key, ""), 404, "OVERRIDE_NOT_FOUND")
	wantError(t, e.call(t, "GET", "/rules/nope/overrides", c.Key, ""), 404, "RULE_NOT_FOUND")
	// Another client's rule of the same name is not yours.
	other := e.register(t, "overrideother")
	wantError(t, e.call(t, "POST", "/rules/api/overrides", other.Key, `{"identifier":"a","limit":5}`), 404, "RULE_NOT_FOUND")
}
