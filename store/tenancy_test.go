package store

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestReleaseDomain: a released domain leaves its client without one (its
// rules stay) and may be given to another client.
func TestReleaseDomain(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c, err := db.CreateClient(ctx, Client{Name: "edge", Email: "e@example.com", Domain: "edge"}, keyHash("e"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "r", Limit: algorithms.Limit{Limit: 1, Window: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		rev, _ := db.Revision(ctx)
		got, err := db.ReleaseDomain(ctx, "edge")
		if err != nil || got.ID != c.ID || got.Domain != "" {
			t.Fatalf("ReleaseDomain(edge) = %+v, %v; want client %s without a domain", got, err, c.ID)
		}
		if after, _ := db.Revision(ctx); after == rev {
			t.Errorf("revision unchanged by the release: caches would not see it")
		}
		if rules, err := db.Rules(ctx, c.ID); err != nil || len(rules) != 1 {
			t.Errorf("rules after the release: %v, %v; want the one rule", rules, err)
		}
		_, err = db.ReleaseDomain(ctx, "edge")
		wantErr(t, err, ErrNotFound)
		if _, err := db.CreateClient(ctx, Client{Name: "next", Email: "n@example.com", Domain: "edge"}, keyHash("n")); err != nil {
			t.Errorf("the released domain is not free: %v", err)
		}
	})
}

// TestMigration0007KeepsRows: copying the clients table (SQLite) or
// changing its constraints (PostgreSQL) keeps every client, rule and
// exemption, both ways: down gives a client without a domain its id as
// one, up again keeps that.
func TestMigration0007KeepsRows(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		c, err := db.CreateClient(ctx, Client{Name: "kept", Email: "k@example.com"}, keyHash("k"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "r", Limit: algorithms.Limit{Limit: 1, Window: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateExemption(ctx, Exemption{ClientID: c.ID, Identifier: "x"}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		check := func(what string) {
			t.Helper()
			db := mustOpen(t, url) // Open migrates up again
			defer db.Close()
			got, err := db.ClientByID(ctx, c.ID)
			rules, rerr := db.Rules(ctx, c.ID)
			exemptions, eerr := db.Exemptions(ctx, c.ID)
			if err != nil || got.Domain != c.ID || rerr != nil || len(rules) != 1 || eerr != nil || len(exemptions) != 1 {
				t.Errorf("after %s: client %+v (%v), rules %v (%v), exemptions %v (%v); want the client of domain %s (its id), its rule and its exemption",
					what, got, err, rules, rerr, exemptions, eerr, c.ID)
			}
		}
		for v := latestMigration(t); v > 6; {
			var dirty bool
			if v, dirty, err = Migrate(ctx, url, "down"); err != nil || dirty {
				t.Fatalf("migrate down = %d dirty %v, %v", v, dirty, err)
			}
		}
		check("migrating down to 6 and up again")
	})
}
