package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
)

// lim is an engine limit, for short.
func lim(alg algorithms.Algorithm, limit int64, window time.Duration) algorithms.Limit {
	return algorithms.Limit{Algorithm: alg, Limit: limit, Window: window}
}

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
		bucket := algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 10, RefillRate: 0.5}
		created, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "login", Descriptors: login, RateLimits: []RuleLimit{
			{Name: "burst", Limit: lim(algorithms.FixedWindow, 5, time.Minute)},
			{Name: "daily", Limit: lim("", 100, 24*time.Hour), AlwaysCount: true},
			{Limit: bucket},
		}})
		if err != nil {
			t.Fatal(err)
		}
		want := Rule{ClientID: c.ID, Name: "login", Descriptors: login, CreatedAt: created.CreatedAt,
			Limit: lim(algorithms.FixedWindow, 5, time.Minute), // RateLimits[0]
			RateLimits: []RuleLimit{
				{Name: "burst", Limit: lim(algorithms.FixedWindow, 5, time.Minute)},
				{Name: "daily", Limit: lim(algorithms.SlidingWindow, 100, 24*time.Hour), AlwaysCount: true},
				{Limit: bucket},
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
		tokens, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "tokens", Limit: lim(algorithms.FixedWindow, 1000, time.Minute),
			AlwaysCount: true, Descriptors: []DescriptorEntry{{Key: "tenant"}}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]RuleLimit{{Limit: lim(algorithms.FixedWindow, 1000, time.Minute), AlwaysCount: true}}, tokens.Limits()); diff != "" {
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
		up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "login", Descriptors: login, Limit: lim(algorithms.GCRA, 3, time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if up.RateLimits != nil || up.AlwaysCount || up.Limit.Algorithm != algorithms.GCRA {
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
	minute := RuleLimit{Limit: lim(algorithms.FixedWindow, 10, time.Minute)}
	tests := []struct {
		name   string
		in     Rule
		msg    string
		engine bool // refused by algorithms.Limit.Validate
	}{
		{"without descriptors", Rule{RateLimits: []RuleLimit{minute}},
			"rate_limits is only for rules with descriptors (Envoy requests); a rule for /check has one limit", false},
		{"too many", Rule{Descriptors: desc, RateLimits: make([]RuleLimit, 17)}, "rate_limits has more than 16 limits", false},
		{"bad name", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Name: "a b", Limit: lim(algorithms.FixedWindow, 1, time.Second)}}},
			"rate_limits[0]: name must be 1 to 100 characters of A-Z, a-z, 0-9, '_', '.', ':', '-'", false},
		{"same name", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Name: "x", Limit: lim(algorithms.FixedWindow, 1, time.Second)}, {Name: "x", Limit: lim(algorithms.FixedWindow, 2, time.Second)}}},
			`rate_limits[1]: name "x" is already the name of rate_limits[0]`, false},
		{"same limit", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Name: "again", Limit: lim(algorithms.FixedWindow, 10, time.Minute), AlwaysCount: true}}},
			"rate_limits[1]: same algorithm, limit, window and refill_rate as rate_limits[0]: the two would count against one counter", false},
		{"bad limit", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Limit: lim(algorithms.FixedWindow, 0, time.Second)}}},
			"rate_limits[1]: limit 0 must be between 1 and 1000000000000", true},
		{"no window", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Limit: lim(algorithms.GCRA, 1, 0)}}},
			"rate_limits[1]: window 0s must be between 1ms and 366 days", true},
		{"fractional window", Rule{Descriptors: desc, RateLimits: []RuleLimit{minute, {Limit: lim(algorithms.GCRA, 1, 1500*time.Millisecond)}}},
			"rate_limits[1]: window must be a whole number of seconds", false},
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
				if got := errors.Is(err, algorithms.ErrInvalid); got != tt.engine {
					t.Errorf("errors.Is(err, algorithms.ErrInvalid) = %v, want %v", got, tt.engine)
				}
			})
		}
	})
}
