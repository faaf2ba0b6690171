package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRuleRateLimits: a rule with descriptors may have several limits
// (rate_limits) and limits that count past the limit (always_count); they
// are stored, listed, cached and updated whole, the client's default
// algorithm filling the limits without one.
func TestRuleRateLimits(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c := mustCreateClient(t, db, "Alpha") // default algorithm sliding_window
		login := []DescriptorEntry{{Key: "path", Value: "/login"}, {Key: "remote_address"}}
		created, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "login", Descriptors: login, RateLimits: []RuleLimit{
			{Name: "burst", Algorithm: FixedWindow, Limit: 5, Window: time.Minute},
			{Name: "daily", Limit: 100, Window: 24 * time.Hour, AlwaysCount: true},
			{Algorithm: TokenBucket, Limit: 10, RefillRate: 0.5},
		}})
		if err != nil {
			t.Fatal(err)
		}
		want := Rule{ClientID: c.ID, Name: "login", Descriptors: login, CreatedAt: created.CreatedAt,
			Algorithm: FixedWindow, Limit: 5, Window: time.Minute, // RateLimits[0]
			RateLimits: []RuleLimit{
				{Name: "burst", Algorithm: FixedWindow, Limit: 5, Window: time.Minute},
				{Name: "daily", Algorithm: SlidingWindow, Limit: 100, Window: 24 * time.Hour, AlwaysCount: true},
				{Algorithm: TokenBucket, Limit: 10, RefillRate: 0.5},
			}}
		if diff := cmp.Diff(want, created); diff != "" {
			t.Errorf("CreateRule (-want +got):\n%s", diff)
		}
		got, err := db.Rule(ctx, c.ID, "login")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Rule (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want.RateLimits, got.Limits()); diff != "" {
			t.Errorf("Limits (-want +got):\n%s", diff)
		}

		// One limit that always counts.
		tokens, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "tokens", Algorithm: FixedWindow, Limit: 1000, Window: time.Minute,
			AlwaysCount: true, Descriptors: []DescriptorEntry{{Key: "tenant"}}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]RuleLimit{{Algorithm: FixedWindow, Limit: 1000, Window: time.Minute, AlwaysCount: true}}, tokens.Limits()); diff != "" {
			t.Errorf("Limits of a one-limit rule (-want +got):\n%s", diff)
		}

		cache := NewCache(db, time.Hour, nil)
		if err := cache.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		rules := cache.DescriptorRules(c.ID)
		if len(rules) != 2 || !cmp.Equal(rules[0], want) || !rules[1].AlwaysCount {
			t.Errorf("cached descriptor rules = %+v", rules)
		}

		// An update replaces the list whole; back to one limit, the list is gone.
		up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "login", Descriptors: login, Algorithm: GCRA, Limit: 3, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if up.RateLimits != nil || up.AlwaysCount || up.Algorithm != GCRA {
			t.Errorf("updated to one limit: %+v", up)
		}
		got, err = db.Rule(ctx, c.ID, "login")
		if err != nil || got.RateLimits != nil || len(got.Limits()) != 1 {
			t.Errorf("after the update: %+v, %v; want one limit", got, err)
		}
	})
}

func TestRuleRateLimitsValidation(t *testing.T) {
	desc := []DescriptorEntry{{Key: "user"}}
	minute := RuleLimit{Algorithm: FixedWindow, Limit: 10, Window: time.Minute}
	tests := []struct {
		name string
		in   Rule
		msg  string
	}{
		{"without descriptors", Rule{RateLimits: []RuleLimit{minute}},
			"rate_limits is only for rules with descriptors (Envoy requests); a rule for /check has one limit"},
		{"too many", Rule{Descriptors: desc, RateLimits: make([]RuleLimit, 17)}, "rate_limits has more than 16 limits"},
		{"bad name", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Name: "a b", Algorithm: FixedWindow, Limit: 1, Window: time.Second}}},
			"rate_limits[0]: name must be 1 to 100 characters of A-Z, a-z, 0-9, '_', '.', ':', '-'"},
		{"same name", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Name: "x", Algorithm: FixedWindow, Limit: 1, Window: time.Second}, {Name: "x", Algorithm: FixedWindow, Limit: 2, Window: time.Second}}},
			`rate_limits[1]: name "x" is already the name of rate_limits[0]`},
		{"same limit", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Name: "again", Algorithm: FixedWindow, Limit: 10, Window: time.Minute, AlwaysCount: true}}},
			"rate_limits[1]: same algorithm, limit, window and refill_rate as rate_limits[0]: the two would count against one counter"},
		{"bad limit", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Algorithm: FixedWindow, Window: time.Second}}},
			"rate_limits[1]: limit must be greater than 0"},
		{"no window", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Algorithm: GCRA, Limit: 1}}},
			"rate_limits[1]: window is required for gcra"},
	}
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		c := mustCreateClient(t, db, "Alpha")
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := tt.in
				r.ClientID, r.Name = c.ID, "r"
				_, err := db.CreateRule(t.Context(), r)
				wantErr(t, err, ErrInvalid)
				if err.Error() != tt.msg {
					t.Errorf("err = %q, want %q", err, tt.msg)
				}
			})
		}
	})
}
