package store

import (
	"errors"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

func TestOverrides(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a := mustCreateClient(t, db, "Alpha")
		fw := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Minute}
		if _, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: fw}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.PutOverride(ctx, Override{ClientID: a.ID, Rule: "nope", Identifier: "acme", Limit: 5}); !errors.Is(err, ErrNotFound) {
			t.Errorf("override of no rule: %v, want ErrNotFound", err)
		}
		put := func(id string, limit int64, window time.Duration) (Override, bool) {
			t.Helper()
			o, created, err := db.PutOverride(ctx, Override{ClientID: a.ID, Rule: "api", Identifier: id, Limit: limit, Window: window})
			if err != nil {
				t.Fatalf("PutOverride %s: %v", id, err)
			}
			return o, created
		}
		first, created := put("acme", 1000, 0)
		if !created || first.Limit != 1000 || first.CreatedAt.IsZero() {
			t.Errorf("first put = %+v created %v", first, created)
		}
		again, created := put("acme", 2000, time.Hour)
		if created || again.Limit != 2000 || again.Window != time.Hour || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("replace = %+v created %v; want limit 2000, window 1h, the first's CreatedAt %v", again, created, first.CreatedAt)
		}
		put("ac*", 10, 0)
		put("acme-eu*", 20, 0)
		put("*", 1, 0)
		for _, bad := range []Override{
			{Identifier: "x", Limit: 0},
			{Identifier: "x", Limit: 5, Window: 1500 * time.Millisecond},
			{Identifier: "", Limit: 5},
		} {
			bad.ClientID, bad.Rule = a.ID, "api"
			if _, _, err := db.PutOverride(ctx, bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("PutOverride(%+v) = %v, want ErrInvalid", bad, err)
			}
		}
		list, err := db.Overrides(ctx, a.ID, "api")
		if err != nil || len(list) != 4 || list[0].Identifier != "*" || list[3].Identifier != "acme-eu*" {
			t.Fatalf("Overrides = %+v, %v; want 4 by identifier", list, err)
		}
		cache := NewCache(db, time.Hour, nil)
		if err := cache.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]string{"acme": "acme", "acme-eu-1": "acme-eu*", "acme-us": "ac*", "ac": "ac*", "zeta": "*"} {
			if o, ok := cache.Override(a.ID, "api", id); !ok || o.Identifier != want {
				t.Errorf("Override(%q) = %q %v, want %q", id, o.Identifier, ok, want)
			}
		}
		if err := db.DeleteOverride(ctx, a.ID, "api", "*"); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteOverride(ctx, a.ID, "api", "*"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete again = %v, want ErrNotFound", err)
		}
		if err := cache.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if o, ok := cache.Override(a.ID, "api", "zeta"); ok {
			t.Errorf("zeta after deleting *: %+v", o)
		}
		// A rule of several limits takes no override; a deleted rule takes
		// its overrides with it.
		if _, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "multi", Descriptors: []DescriptorEntry{{Key: "k"}},
			RateLimits: []RuleLimit{{Limit: fw}, {Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Second}}}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.PutOverride(ctx, Override{ClientID: a.ID, Rule: "multi", Identifier: "x", Limit: 5}); !errors.Is(err, ErrInvalid) {
			t.Errorf("override of a rule of several limits: %v, want ErrInvalid", err)
		}
		if err := db.DeleteRule(ctx, a.ID, "api"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Overrides(ctx, a.ID, "api"); !errors.Is(err, ErrNotFound) {
			t.Errorf("overrides of a deleted rule: %v, want ErrNotFound", err)
		}
		if s, err := db.Snapshot(ctx); err != nil || len(s.Overrides) != 0 {
			t.Errorf("snapshot after the rule's deletion: %d overrides, %v; want 0", len(s.Overrides), err)
		}
	})
}

// TestOverridesPerRule: a rule takes MaxOverridesPerRule overrides, and a
// new one past them is ErrTooMany (replacing one is still fine).
func TestOverridesPerRule(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a := mustCreateClient(t, db, "Alpha")
		if _, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		// All but one, at once.
		if _, err := db.sql.ExecContext(ctx, db.q(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO rule_overrides (client_id, rule_name, identifier, "limit", window_seconds, created_at)
			SELECT ?, 'api', 'user-' || i, 5, 0, ? FROM n`), MaxOverridesPerRule-1, a.ID, db.timestamp()); err != nil {
			t.Fatal(err)
		}
		o := Override{ClientID: a.ID, Rule: "api", Identifier: "last", Limit: 5}
		if _, _, err := db.PutOverride(ctx, o); err != nil {
			t.Fatalf("override %d: %v", MaxOverridesPerRule, err)
		}
		o.Identifier = "one-more"
		if _, _, err := db.PutOverride(ctx, o); !errors.Is(err, ErrTooMany) {
			t.Errorf("override %d: %v, want ErrTooMany", MaxOverridesPerRule+1, err)
		}
		o.Identifier, o.Limit = "user-7", 9
		if _, created, err := db.PutOverride(ctx, o); err != nil || created {
			t.Errorf("replacing one of a full rule: created %v, %v; want replaced", created, err)
		}
	})
}
