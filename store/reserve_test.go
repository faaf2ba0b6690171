package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestRuleReserve: a rule with descriptors may reserve on Envoy's calls;
// the reservation is stored, read back, cached, replaced and dropped with
// the rule, and refused where it cannot mean anything.
func TestRuleReserve(t *testing.T) {
	tenant := []DescriptorEntry{{Key: "tenant"}}
	reserve := &RuleReserve{Hits: 1000, TTL: time.Minute, Handle: "request_id"}
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c := mustCreateClient(t, db, "Alpha")
		created, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "tokens", Limit: lim(algorithms.FixedWindow, 10000, time.Hour),
			AlwaysCount: true, Descriptors: tenant, Reserve: reserve})
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.Rule(ctx, c.ID, "tokens")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(created, got); diff != "" || got.Reserve == nil {
			t.Errorf("Rule (-created +got):\n%s", diff)
		}
		up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "tokens", Limit: lim(algorithms.FixedWindow, 10000, time.Hour), Descriptors: tenant})
		if err != nil || up.Reserve != nil {
			t.Fatalf("UpdateRule without reserve = %+v, %v", up, err)
		}
		if got, _ := db.Rule(ctx, c.ID, "tokens"); got.Reserve != nil {
			t.Errorf("reserve kept after an update without it: %+v", got.Reserve)
		}
		for _, tt := range []struct {
			name string
			in   Rule
			msg  string
		}{
			{"without descriptors", Rule{Limit: lim(algorithms.FixedWindow, 10, time.Hour), Reserve: reserve},
				"reserve is only for rules with descriptors: it reserves on Envoy's calls"},
			{"over the limit", Rule{Limit: lim(algorithms.FixedWindow, 999, time.Hour), Descriptors: tenant, Reserve: reserve},
				"reserve.hits 1000 must be between 1 and the limit, 999"},
			{"over a limit of rate_limits", Rule{Descriptors: tenant, Reserve: reserve, RateLimits: []RuleLimit{
				{Limit: lim(algorithms.FixedWindow, 10000, time.Hour)}, {Limit: lim(algorithms.FixedWindow, 500, time.Minute)}}},
				"reserve.hits 1000 must be between 1 and the limit, 500"},
			{"handle among the descriptors", Rule{Limit: lim(algorithms.FixedWindow, 10000, time.Hour), Descriptors: tenant,
				Reserve: &RuleReserve{Hits: 1, TTL: time.Second, Handle: "tenant"}},
				`reserve.handle "tenant" is a key of the rule's descriptors: the handle entry is taken out before matching`},
			{"no handle", Rule{Limit: lim(algorithms.FixedWindow, 10000, time.Hour), Descriptors: tenant, Reserve: &RuleReserve{Hits: 1, TTL: time.Second}},
				"reserve.handle is required: the key of the request's descriptor entry that names the request (as request_id)"},
			{"ttl", Rule{Limit: lim(algorithms.FixedWindow, 10000, time.Hour), Descriptors: tenant, Reserve: &RuleReserve{Hits: 1, TTL: 1500 * time.Millisecond, Handle: "h"}},
				"reserve.ttl must be a whole number of seconds from 1 to 86400"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := tt.in
				r.ClientID, r.Name = c.ID, "bad"
				_, err := db.CreateRule(ctx, r)
				wantErr(t, err, ErrInvalid)
				if err.Error() != tt.msg {
					t.Errorf("err = %q, want %q", err, tt.msg)
				}
			})
		}
	})
}
