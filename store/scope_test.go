package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
)

// global is a global (so approximate) engine limit, for short.
func global(alg algorithms.Algorithm, limit int64, window time.Duration) algorithms.Limit {
	l := approx(alg, limit, window)
	l.Global = true
	return l
}

// TestRuleScope: a rule's scope (of its one limit, and of each of its
// rate_limits) is stored, read back, listed, cached, updated and kept by
// its overrides; regional is the default; GlobalRules names the rules with
// a global limit; a rule stored before migration 0011 is regional, and
// migrating down and up again keeps the rules.
func TestRuleScope(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c := mustCreateClient(t, db, "Alpha") // default algorithm sliding_window
		shop, err := db.CreateClient(ctx, Client{Name: "Shop", Email: "shop@example.com", Domain: "shop"}, keyHash("key-shop"))
		if err != nil {
			t.Fatal(err)
		}
		tenant, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "tenant", Limit: global(algorithms.FixedWindow, 6000, time.Minute)})
		if err != nil || tenant.Limit != global(algorithms.FixedWindow, 6000, time.Minute) {
			t.Fatalf("CreateRule global = %+v, %v", tenant.Limit, err)
		}
		defaulted, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "defaulted", Limit: global("", 100, time.Minute)})
		if err != nil || defaulted.Limit != global(algorithms.SlidingWindow, 100, time.Minute) {
			t.Errorf("CreateRule global without algorithm = %+v, %v; want the client's sliding_window", defaulted.Limit, err)
		}
		regional, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "regional", Limit: approx(algorithms.FixedWindow, 10, time.Second)})
		if err != nil || regional.Limit.Global {
			t.Errorf("CreateRule regional = %+v, %v", regional.Limit, err)
		}
		multi, err := db.CreateRule(ctx, Rule{ClientID: shop.ID, Name: "multi", Descriptors: []DescriptorEntry{{Key: "user"}}, RateLimits: []RuleLimit{
			{Name: "burst", Limit: lim(algorithms.FixedWindow, 10, time.Second)},
			{Name: "daily", Limit: global(algorithms.SlidingWindow, 100_000, 24*time.Hour)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got := multi.Limits(); got[0].Limit.Global || !got[1].Limit.Global {
			t.Errorf("rate_limits scopes = %v, %v; want regional, global", got[0].Limit.Global, got[1].Limit.Global)
		}
		for _, want := range []Rule{tenant, defaulted, regional, multi} {
			got, err := db.Rule(ctx, want.ClientID, want.Name)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Rule(%q) (-want +got):\n%s", want.Name, diff)
			}
		}
		list, err := db.Rules(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Rule{defaulted, regional, tenant}, list); diff != "" {
			t.Errorf("Rules (-want +got):\n%s", diff)
		}
		gr, err := db.GlobalRules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []GlobalRule{
			{ClientID: c.ID, Client: "Alpha", Rule: "defaulted"},
			{ClientID: c.ID, Client: "Alpha", Rule: "tenant"},
			{ClientID: shop.ID, Client: "Shop", Domain: "shop", Rule: "multi"},
		}
		if diff := cmp.Diff(want, gr); diff != "" {
			t.Errorf("GlobalRules (-want +got):\n%s", diff)
		}

		// Updates change the scope both ways; an override keeps it.
		if up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "defaulted", Limit: approx(algorithms.SlidingWindow, 100, time.Minute)}); err != nil || up.Limit.Global {
			t.Errorf("UpdateRule to regional = %+v, %v", up.Limit, err)
		}
		if up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "regional", Limit: global(algorithms.FixedWindow, 10, time.Second)}); err != nil || !up.Limit.Global {
			t.Errorf("UpdateRule to global = %+v, %v", up.Limit, err)
		}
		if _, _, err := db.PutOverride(ctx, Override{ClientID: c.ID, Rule: "tenant", Identifier: "acme", Limit: 60_000}); err != nil {
			t.Fatal(err)
		}
		cache := NewCache(db, time.Hour, nil)
		if err := cache.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"tenant": true, "regional": true, "defaulted": false} {
			if r, ok := cache.Rule(c.ID, name); !ok || r.Limit.Global != want {
				t.Errorf("cached rule %s = %+v, %v; want global %v", name, r.Limit, ok, want)
			}
		}
		rule, _ := cache.Rule(c.ID, "tenant")
		o, ok := cache.Override(c.ID, "tenant", "acme")
		if got := o.Apply(rule.Limit); !ok || got != global(algorithms.FixedWindow, 60_000, time.Minute) {
			t.Errorf("override of a global rule = %+v (found %v), want global 60000 a minute", got, ok)
		}

		// Down to 10 (no scope column) and up again: the rules are
		// regional, as every rule stored before 0011.
		db.Close()
		if v, dirty, err := Migrate(ctx, url, "down"); err != nil || dirty || v != 10 {
			t.Fatalf("migrate down = %d dirty %v, %v; want 10", v, dirty, err)
		}
		db = mustOpen(t, url) // Open migrates up again
		for _, name := range []string{"tenant", "regional"} {
			if r, err := db.Rule(ctx, c.ID, name); err != nil || r.Limit.Global {
				t.Errorf("rule %s after 0011 down and up = %+v, %v; want regional", name, r.Limit, err)
			}
		}
	})
}

// TestRuleScopeRefused: a global limit is approximate, so a window's (the
// engine's refusal, errors.Is algorithms.ErrInvalid).
func TestRuleScopeRefused(t *testing.T) {
	desc := []DescriptorEntry{{Key: "user"}}
	exactGlobal := lim(algorithms.FixedWindow, 10, time.Minute)
	exactGlobal.Global = true
	tests := []struct {
		name string
		in   Rule
		msg  string
	}{
		{"exact", Rule{Limit: exactGlobal},
			"scope global is decided from memory with leases of the global budget: its accuracy is approximate, not exact (an exact global limit would wait on the global Redis for every decision)"},
		{"token_bucket", Rule{Limit: global(algorithms.TokenBucket, 10, time.Minute)},
			"accuracy approximate applies to fixed_window and sliding_window, not token_bucket (whose every decision must read and write the shared state)"},
		{"exact in rate_limits", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Limit: lim(algorithms.FixedWindow, 1, time.Second)}, {Limit: exactGlobal}}},
			"rate_limits[1]: scope global is decided from memory with leases of the global budget: its accuracy is approximate, not exact (an exact global limit would wait on the global Redis for every decision)"},
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
				if !errors.Is(err, algorithms.ErrInvalid) {
					t.Errorf("err %v is not the engine's refusal", err)
				}
			})
		}
	})
}
