package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
)

// approx is an approximate engine limit, for short.
func approx(alg algorithms.Algorithm, limit int64, window time.Duration) algorithms.Limit {
	return algorithms.Limit{Algorithm: alg, Limit: limit, Window: window, Accuracy: algorithms.Approximate}
}

// TestRuleAccuracy: a rule's accuracy (of its one limit, and of each of its
// rate_limits) is stored, read back, listed, cached, updated and kept by
// its overrides; "exact" is the default, Exact.
func TestRuleAccuracy(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c := mustCreateClient(t, db, "Alpha") // default algorithm sliding_window
		hourly, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "hourly", Limit: approx(algorithms.FixedWindow, 640, time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if hourly.Limit != approx(algorithms.FixedWindow, 640, time.Hour) {
			t.Errorf("CreateRule limit = %+v, want approximate", hourly.Limit)
		}
		// "exact" spelled out is the default, as the YAML and REST read it;
		// a limit without an algorithm takes the client's default.
		exact, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "exact", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute, Accuracy: "exact"}})
		if err != nil || exact.Limit.Accuracy != algorithms.Exact {
			t.Errorf("CreateRule with accuracy exact = %+v, %v; want Exact", exact.Limit, err)
		}
		defaulted, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "defaulted", Limit: approx("", 100, time.Minute)})
		if err != nil || defaulted.Limit != approx(algorithms.SlidingWindow, 100, time.Minute) {
			t.Errorf("CreateRule approximate without algorithm = %+v, %v; want the client's sliding_window", defaulted.Limit, err)
		}
		login := []DescriptorEntry{{Key: "path", Value: "/login"}}
		multi, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "multi", Descriptors: login, RateLimits: []RuleLimit{
			{Name: "burst", Limit: lim(algorithms.FixedWindow, 10, time.Second)},
			{Name: "daily", Limit: approx(algorithms.SlidingWindow, 100_000, 24*time.Hour)},
		}})
		if err != nil {
			t.Fatal(err)
		}

		for _, want := range []Rule{hourly, exact, defaulted, multi} {
			got, err := db.Rule(ctx, c.ID, want.Name)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Rule(%q) (-want +got):\n%s", want.Name, diff)
			}
		}
		if got := multi.Limits(); got[0].Limit.Accuracy != algorithms.Exact || got[1].Limit.Accuracy != algorithms.Approximate {
			t.Errorf("rate_limits accuracies = %q, %q; want exact, approximate", got[0].Limit.Accuracy, got[1].Limit.Accuracy)
		}
		list, err := db.Rules(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Rule{defaulted, exact, hourly, multi}, list); diff != "" {
			t.Errorf("Rules (-want +got):\n%s", diff)
		}

		// Updates change the accuracy both ways; an override keeps it.
		if up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "exact", Limit: approx(algorithms.FixedWindow, 5, time.Minute)}); err != nil || up.Limit.Accuracy != algorithms.Approximate {
			t.Errorf("UpdateRule to approximate = %+v, %v", up.Limit, err)
		}
		if up, err := db.UpdateRule(ctx, Rule{ClientID: c.ID, Name: "defaulted", Limit: lim(algorithms.SlidingWindow, 100, time.Minute)}); err != nil || up.Limit.Accuracy != algorithms.Exact {
			t.Errorf("UpdateRule to exact = %+v, %v", up.Limit, err)
		}
		if _, _, err := db.PutOverride(ctx, Override{ClientID: c.ID, Rule: "hourly", Identifier: "acme", Limit: 6400}); err != nil {
			t.Fatal(err)
		}
		cache := NewCache(db, time.Hour, nil)
		if err := cache.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]algorithms.Accuracy{"hourly": algorithms.Approximate, "exact": algorithms.Approximate, "defaulted": algorithms.Exact} {
			if r, ok := cache.Rule(c.ID, name); !ok || r.Limit.Accuracy != want {
				t.Errorf("cached rule %s = %+v, %v; want accuracy %q", name, r.Limit, ok, want)
			}
		}
		rule, _ := cache.Rule(c.ID, "hourly")
		o, ok := cache.Override(c.ID, "hourly", "acme")
		if got := o.Apply(rule.Limit); !ok || got != approx(algorithms.FixedWindow, 6400, time.Hour) {
			t.Errorf("override of an approximate rule = %+v (found %v), want approximate 6400 per hour", got, ok)
		}
		if rules := cache.DescriptorRules(c.ID); len(rules) != 1 || !cmp.Equal(rules[0], multi) {
			t.Errorf("cached descriptor rules = %+v, want %+v", rules, multi)
		}
	})
}

// TestRuleAccuracyRefused: approximate is for the window algorithms (the
// engine's refusal, errors.Is algorithms.ErrInvalid), and an accuracy
// is exact or approximate.
func TestRuleAccuracyRefused(t *testing.T) {
	desc := []DescriptorEntry{{Key: "user"}}
	tests := []struct {
		name   string
		in     Rule
		msg    string
		engine bool // refused by algorithms.Limit.Validate
	}{
		{"token_bucket", Rule{Limit: approx(algorithms.TokenBucket, 10, time.Minute)},
			"accuracy approximate applies to fixed_window and sliding_window, not token_bucket (whose every decision must read and write the shared state)", true},
		{"gcra", Rule{Limit: approx(algorithms.GCRA, 10, time.Minute)},
			"accuracy approximate applies to fixed_window and sliding_window, not gcra (whose every decision must read and write the shared state)", true},
		{"unknown", Rule{Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second, Accuracy: "rough"}},
			`accuracy "rough" is not one of exact or approximate`, true},
		{"token_bucket in rate_limits", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Limit: lim(algorithms.FixedWindow, 1, time.Second)}, {Limit: approx(algorithms.TokenBucket, 10, 0)}}},
			"rate_limits[1]: accuracy approximate applies to fixed_window and sliding_window, not token_bucket (whose every decision must read and write the shared state)", true},
		{"one counter, two accuracies", Rule{Descriptors: desc, RateLimits: []RuleLimit{{Limit: lim(algorithms.FixedWindow, 10, time.Minute)}, {Limit: approx(algorithms.FixedWindow, 10, time.Minute)}}},
			"rate_limits[1]: same algorithm, limit, window and refill_rate as rate_limits[0]: the two would count against one counter", false},
	}
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		c := mustCreateClient(t, db, "Alpha")
		bucket, err := db.CreateClient(t.Context(), Client{Name: "Bucket", Email: "bucket@example.com", DefaultAlgorithm: algorithms.TokenBucket}, keyHash("key-bucket"))
		if err != nil {
			t.Fatal(err)
		}
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
		// Without an algorithm, the client's default decides.
		_, err = db.CreateRule(t.Context(), Rule{ClientID: bucket.ID, Name: "r", Limit: approx("", 10, time.Minute)})
		wantErr(t, err, algorithms.ErrInvalid, "not token_bucket")
		// An update is refused alike, and changes nothing.
		if _, err := db.CreateRule(t.Context(), Rule{ClientID: c.ID, Name: "kept", Limit: approx(algorithms.FixedWindow, 10, time.Minute)}); err != nil {
			t.Fatal(err)
		}
		_, err = db.UpdateRule(t.Context(), Rule{ClientID: c.ID, Name: "kept", Limit: approx(algorithms.GCRA, 10, time.Minute)})
		wantErr(t, err, algorithms.ErrInvalid, "not gcra")
		if got, err := db.Rule(t.Context(), c.ID, "kept"); err != nil || got.Limit != approx(algorithms.FixedWindow, 10, time.Minute) {
			t.Errorf("rule after a refused update = %+v, %v", got.Limit, err)
		}
	})
}
