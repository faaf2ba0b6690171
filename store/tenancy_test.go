package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestQuotas: a client at its quota of rules, exemptions or overrides is
// refused one more (a *QuotaError, ErrTooMany); replacing an override is
// no new one; another client is not affected; on PostgreSQL, concurrent
// writes of one client count in turn.
func TestQuotas(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		db.SetQuotas(Quotas{Rules: 2, Exemptions: 2, Overrides: 2})
		ctx := t.Context()
		a, b := mustCreateClient(t, db, "Quota A"), mustCreateClient(t, db, "Quota B")
		rule := func(c Client, name string) error {
			_, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: name, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Minute}})
			return err
		}
		exempt := func(c Client, id string) error {
			_, err := db.CreateExemption(ctx, Exemption{ClientID: c.ID, Identifier: id})
			return err
		}
		override := func(c Client, r, id string) error {
			_, _, err := db.PutOverride(ctx, Override{ClientID: c.ID, Rule: r, Identifier: id, Limit: 5})
			return err
		}
		wantQuota := func(what string, err error, kind string) {
			t.Helper()
			var qe *QuotaError
			if !errors.As(err, &qe) || !errors.Is(err, ErrTooMany) || qe.What != kind || qe.Max != 2 {
				t.Errorf("%s: %v, want a QuotaError of 2 %s", what, err, kind)
			}
		}
		for _, err := range []error{rule(a, "r1"), rule(a, "r2"), exempt(a, "x1"), exempt(a, "x2"),
			override(a, "r1", "u1"), override(a, "r2", "u2"), override(a, "r2", "u2"), rule(b, "r1"), exempt(b, "x1")} {
			if err != nil {
				t.Fatalf("a write within the quotas: %v", err)
			}
		}
		wantQuota("a third rule", rule(a, "r3"), "rules")
		wantQuota("a third exemption", exempt(a, "x3"), "exemptions")
		wantQuota("a third override", override(a, "r1", "u3"), "overrides")
		if err := db.DeleteRule(ctx, a.ID, "r2"); err != nil { // its override goes with it
			t.Fatal(err)
		}
		if err := rule(a, "r3"); err != nil {
			t.Errorf("a rule after one was deleted: %v", err)
		}
		if err := override(a, "r1", "u3"); err != nil {
			t.Errorf("an override after the deletion took one: %v", err)
		}

		// Ten writes of one client at once: exactly the quota passes.
		db.SetQuotas(Quotas{Exemptions: 5})
		c := mustCreateClient(t, db, "Quota C")
		var wg sync.WaitGroup
		var passed atomic.Int32
		for i := range 10 {
			wg.Go(func() {
				err := exempt(c, fmt.Sprint("c", i))
				switch {
				case err == nil:
					passed.Add(1)
				case !errors.Is(err, ErrTooMany) && !errors.Is(err, ErrUnavailable):
					t.Errorf("concurrent exemption: %v", err)
				}
			})
		}
		wg.Wait()
		if list, _ := db.Exemptions(ctx, c.ID); passed.Load() > 5 || len(list) > 5 {
			t.Errorf("%d concurrent exemptions passed, %d stored; want at most the quota, 5", passed.Load(), len(list))
		}
	})
}

// TestChangesSince: the rows of the clients written since a revision, and
// only theirs; everything when the log does not reach back (a revision
// before it, or before the log's first row).
func TestChangesSince(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		a, b := mustCreateClient(t, db, "Changes A"), mustCreateClient(t, db, "Changes B")
		for _, c := range []Client{a, b} {
			if _, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}}); err != nil {
				t.Fatal(err)
			}
		}
		rev, _ := db.Revision(ctx)
		if ch, err := db.ChangesSince(ctx, rev); err != nil || ch.Full || len(ch.Changed) != 0 || rows(ch.Snapshot) != 0 {
			t.Errorf("ChangesSince(now) = %+v, %v; want nothing", ch, err)
		}
		if _, err := db.CreateExemption(ctx, Exemption{ClientID: b.ID, Identifier: "x"}); err != nil {
			t.Fatal(err)
		}
		ch, err := db.ChangesSince(ctx, rev)
		if err != nil || ch.Full || ch.Revision != rev+1 || fmt.Sprint(ch.Changed) != "["+b.ID+"]" ||
			len(ch.Clients) != 1 || ch.Clients[0].Client.ID != b.ID || len(ch.Rules) != 1 || len(ch.Exemptions) != 1 {
			t.Errorf("ChangesSince after B's exemption = %+v, %v; want B's rows alone", ch, err)
		}
		for _, since := range []int64{-1, 0} { // 0: before the log's first row (migrations start it at 0, the first write is 1)
			if ch, err := db.ChangesSince(ctx, since); err != nil || (since < 0) != ch.Full || len(ch.Clients) != 2 {
				t.Errorf("ChangesSince(%d) = full %v, %d clients, %v; want both clients (full: %v)", since, ch.Full, len(ch.Clients), err, since < 0)
			}
		}
		if _, err := db.sql.ExecContext(ctx, db.q(`DELETE FROM changes WHERE revision <= ?`), rev); err != nil {
			t.Fatal(err)
		}
		if ch, err := db.ChangesSince(ctx, rev-1); err != nil || !ch.Full || len(ch.Clients) != 2 {
			t.Errorf("ChangesSince a revision the log lost = full %v, %d clients, %v; want everything", ch.Full, len(ch.Clients), err)
		}
	})
}

// TestCacheCatchesUpByClient: a write of one client replaces that client's
// rows in the cache, the others' stay the very same (no reload).
func TestCacheCatchesUpByClient(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		a, b := mustCreateClient(t, db, "Cache A"), mustCreateClient(t, db, "Cache B")
		c := NewCache(db, time.Hour, nil)
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		before := c.load()
		if _, err := db.CreateExemption(ctx, Exemption{ClientID: b.ID, Identifier: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		after := c.load()
		if after.tenants[a.ID] != before.tenants[a.ID] || after.tenants[b.ID] == before.tenants[b.ID] || !c.Exempt(b.ID, "x") {
			t.Errorf("A shared %v, B replaced %v, B's exemption %v; want A shared, B replaced and exempting x",
				after.tenants[a.ID] == before.tenants[a.ID], after.tenants[b.ID] != before.tenants[b.ID], c.Exempt(b.ID, "x"))
		}
		if c.ClientRevision(a.ID) >= c.ClientRevision(b.ID) || c.ClientRevision(b.ID) != c.Revision() {
			t.Errorf("client revisions A %d, B %d, cache %d; want B's the cache's, A's older", c.ClientRevision(a.ID), c.ClientRevision(b.ID), c.Revision())
		}
		if got, ok := c.ClientByKeyHash(keyHash("key-Cache A")); !ok || got.ID != a.ID {
			t.Errorf("A's key after B's write: %v, %v", got, ok)
		}
	})
}
