package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/throttle-rl/throttle/algorithms"
)

func TestCreateClient(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		before := time.Now().Add(-time.Second)

		got, err := db.CreateClient(ctx, Client{Name: "  My App! ", Email: " Dev@Example.COM "}, keyHash("k1"))
		if err != nil {
			t.Fatalf("CreateClient: %v", err)
		}
		want := Client{
			ID:               got.ID,
			Name:             "My App!",
			Email:            "dev@example.com",
			Domain:           "", // none unless given
			DefaultAlgorithm: algorithms.SlidingWindow,
			CreatedAt:        got.CreatedAt,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("CreateClient (-want +got):\n%s", diff)
		}
		if len(got.ID) != 36 {
			t.Errorf("ID = %q, want a UUID", got.ID)
		}
		if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("CreatedAt = %v, want about now", got.CreatedAt)
		}

		byID, err := db.ClientByID(ctx, got.ID)
		if err != nil {
			t.Fatalf("ClientByID: %v", err)
		}
		if diff := cmp.Diff(got, byID); diff != "" {
			t.Errorf("ClientByID (-want +got):\n%s", diff)
		}
		byID, err = db.ClientByID(ctx, strings.ToUpper(got.ID))
		if err != nil || byID.ID != got.ID {
			t.Errorf("ClientByID(upper-case id) = %v, %v; want the client", byID.ID, err)
		}
		byKey, err := db.ClientByKeyHash(ctx, keyHash("k1"))
		if err != nil {
			t.Fatalf("ClientByKeyHash: %v", err)
		}
		if diff := cmp.Diff(got, byKey); diff != "" {
			t.Errorf("ClientByKeyHash (-want +got):\n%s", diff)
		}

		_, err = db.ClientByKeyHash(ctx, keyHash("other"))
		wantErr(t, err, ErrNotFound)
		_, err = db.ClientByID(ctx, "6f1c1f6e-1d0e-4e5e-9d5e-000000000000")
		wantErr(t, err, ErrNotFound)
		_, err = db.ClientByID(ctx, "not-a-uuid")
		wantErr(t, err, ErrNotFound)

		explicit, err := db.CreateClient(ctx, Client{Name: "Edge", Email: "edge@example.com", Domain: "edge.prod", DefaultAlgorithm: algorithms.TokenBucket}, keyHash("k2"))
		if err != nil {
			t.Fatalf("CreateClient with domain: %v", err)
		}
		if explicit.Domain != "edge.prod" || explicit.DefaultAlgorithm != algorithms.TokenBucket {
			t.Errorf("got domain %q algorithm %q, want edge.prod token_bucket", explicit.Domain, explicit.DefaultAlgorithm)
		}
	})
}

func TestCreateClientConflicts(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		first, err := db.CreateClient(ctx, Client{Name: "My App", Email: "a@example.com", Domain: "my-app"}, keyHash("a"))
		if err != nil {
			t.Fatal(err)
		}

		// An email is a contact, not an account: two clients may share one,
		// and so may any number of clients without a domain.
		for i, email := range []string{"A@EXAMPLE.com", "a@example.com"} {
			c, err := db.CreateClient(ctx, Client{Name: "Other", Email: email}, keyHash(fmt.Sprint("b", i)))
			if err != nil || c.Email != "a@example.com" || c.Domain != "" {
				t.Errorf("CreateClient(%s) = %+v, %v; want a client of a@example.com without a domain", email, c, err)
			}
		}

		_, err = db.CreateClient(ctx, Client{Name: "Other", Email: "b@example.com", Domain: first.Domain}, keyHash("c"))
		wantErr(t, err, ErrConflict, "domain", first.Domain)
		if strings.Contains(strings.ToLower(err.Error()), "insert") || strings.Contains(err.Error(), "constraint") {
			t.Errorf("error %q leaks SQL", err)
		}

		_, err = db.CreateClient(ctx, Client{Name: "Dup key", Email: "dup@example.com"}, keyHash("a"))
		wantErr(t, err, ErrConflict)
	})
}

func TestClientValidation(t *testing.T) {
	tests := []struct {
		name  string
		in    Client
		field string
	}{
		{"empty name", Client{Name: "  ", Email: "a@b.c"}, "name"},
		{"long name", Client{Name: strings.Repeat("n", 101), Email: "a@b.c"}, "name"},
		{"no email", Client{Name: "a"}, "email"},
		{"email without at", Client{Name: "a", Email: "ab.c"}, "email"},
		{"email with two at", Client{Name: "a", Email: "a@b@c"}, "email"},
		{"email with space", Client{Name: "a", Email: "a b@c.d"}, "email"},
		{"email without host", Client{Name: "a", Email: "a@"}, "email"},
		{"domain upper case", Client{Name: "a", Email: "a@b.c", Domain: "Edge"}, "domain"},
		{"domain leading dash", Client{Name: "a", Email: "a@b.c", Domain: "-edge"}, "domain"},
		{"domain too long", Client{Name: "a", Email: "a@b.c", Domain: strings.Repeat("d", 101)}, "domain"},
		{"bad algorithm", Client{Name: "a", Email: "a@b.c", DefaultAlgorithm: "leaky_bucket"}, "default_algorithm"},
	}
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := db.CreateClient(t.Context(), tt.in, keyHash(tt.name))
				wantErr(t, err, ErrInvalid, tt.field)
			})
		}
	})
}

func TestRules(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		a := mustCreateClient(t, db, "Alpha")
		b := mustCreateClient(t, db, "Beta")

		in := []Rule{
			{ClientID: a.ID, Name: "z_last", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Minute}},
			{ClientID: a.ID, Name: "api_default", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 100, RefillRate: 2.5},
				Descriptors: []DescriptorEntry{{Key: "path", Value: "/api/*"}, {Key: "user"}}},
			{ClientID: a.ID, Name: "uses.default:algo-1", Limit: algorithms.Limit{Limit: 5, Window: 2 * time.Second}},
		}
		var created []Rule
		for _, r := range in {
			got, err := db.CreateRule(ctx, r)
			if err != nil {
				t.Fatalf("CreateRule(%q): %v", r.Name, err)
			}
			created = append(created, got)
		}
		if created[2].Limit.Algorithm != algorithms.SlidingWindow {
			t.Errorf("rule without algorithm got %q, want the client's default %q", created[2].Limit.Algorithm, algorithms.SlidingWindow)
		}

		list, err := db.Rules(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []Rule{created[1], created[2], created[0]} // by name
		if diff := cmp.Diff(want, list); diff != "" {
			t.Errorf("Rules (-want +got):\n%s", diff)
		}
		got, err := db.Rule(ctx, a.ID, "api_default")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(created[1], got); diff != "" {
			t.Errorf("Rule (-want +got):\n%s", diff)
		}

		_, err = db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "api_default", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		wantErr(t, err, ErrConflict, "api_default")

		// Another client may use the same name, and sees nothing of a's.
		if _, err := db.CreateRule(ctx, Rule{ClientID: b.ID, Name: "api_default", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}}); err != nil {
			t.Fatalf("same name for another client: %v", err)
		}
		_, err = db.Rule(ctx, b.ID, "z_last")
		wantErr(t, err, ErrNotFound, "z_last")
		wantErr(t, db.DeleteRule(ctx, b.ID, "z_last"), ErrNotFound, "z_last")
		if _, err := db.Rule(ctx, a.ID, "z_last"); err != nil {
			t.Errorf("a's rule after b tried to delete it: %v", err)
		}
		bList, err := db.Rules(ctx, b.ID)
		if err != nil || len(bList) != 1 || bList[0].Limit.Limit != 1 {
			t.Errorf("Rules(b) = %v, %v; want only b's rule", bList, err)
		}

		if err := db.DeleteRule(ctx, a.ID, "z_last"); err != nil {
			t.Fatalf("DeleteRule: %v", err)
		}
		wantErr(t, db.DeleteRule(ctx, a.ID, "z_last"), ErrNotFound)
		_, err = db.Rule(ctx, a.ID, "z_last")
		wantErr(t, err, ErrNotFound)

		_, err = db.CreateRule(ctx, Rule{ClientID: "6f1c1f6e-1d0e-4e5e-9d5e-000000000000", Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		wantErr(t, err, ErrNotFound, "client")
		_, err = db.CreateRule(ctx, Rule{ClientID: "nope", Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		wantErr(t, err, ErrNotFound, "client")
		empty, err := db.Rules(ctx, "nope")
		if err != nil || len(empty) != 0 {
			t.Errorf("Rules(bad id) = %v, %v; want none", empty, err)
		}
	})
}

func TestRuleValidation(t *testing.T) {
	tests := []struct {
		name  string
		in    Rule
		field string
	}{
		{"no name", Rule{Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}}, "name"},
		{"bad name", Rule{Name: "a b", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}}, "name"},
		{"long name", Rule{Name: strings.Repeat("r", 101), Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}}, "name"},
		{"bad algorithm", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: "leaky_bucket", Limit: 1, Window: time.Second}}, "algorithm"},
		{"gcra without window", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1}}, "window"},
		{"zero limit", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Window: time.Second}}, "limit"},
		{"negative limit", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: -1, Window: time.Second}}, "limit"},
		{"no window", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 1}}, "window"},
		{"fractional window", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: 1500 * time.Millisecond}}, "window"},
		{"negative refill", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: -1}}, "refill_rate"},
		{"descriptor without key", Rule{Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1}, Descriptors: []DescriptorEntry{{Value: "v"}}}, "descriptors[0].key"},
		{"bad name, default algorithm", Rule{Name: "a/b", Limit: algorithms.Limit{Limit: 1, Window: time.Second}}, "name"},
	}
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		c := mustCreateClient(t, db, "Alpha")
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := tt.in
				r.ClientID = c.ID
				_, err := db.CreateRule(t.Context(), r)
				wantErr(t, err, ErrInvalid, tt.field)
			})
		}
	})
}

// TestRuleRefillRateIgnoredOnWindows: a refill rate sent with a window
// algorithm or gcra does not apply; the rule is stored without it.
func TestRuleRefillRateIgnoredOnWindows(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		c := mustCreateClient(t, db, "Alpha")
		for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.GCRA} {
			r, err := db.CreateRule(t.Context(), Rule{ClientID: c.ID, Name: "r-" + string(alg), Limit: algorithms.Limit{Algorithm: alg, Limit: 1, Window: time.Second, RefillRate: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if r.Limit.RefillRate != 0 {
				t.Errorf("stored refill_rate = %v, want 0 (ignored for %s)", r.Limit.RefillRate, alg)
			}
		}
	})
}

func TestExemptions(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		a := mustCreateClient(t, db, "Alpha")
		b := mustCreateClient(t, db, "Beta")

		e1, err := db.CreateExemption(ctx, Exemption{ClientID: a.ID, Identifier: "internal-service", Reason: "Internal microservice"})
		if err != nil {
			t.Fatal(err)
		}
		e2, err := db.CreateExemption(ctx, Exemption{ClientID: a.ID, Identifier: "10.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		list, err := db.Exemptions(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Exemption{e2, e1}, list); diff != "" {
			t.Errorf("Exemptions (-want +got):\n%s", diff)
		}
		got, err := db.Exemption(ctx, a.ID, "internal-service")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(e1, got); diff != "" {
			t.Errorf("Exemption (-want +got):\n%s", diff)
		}

		_, err = db.CreateExemption(ctx, Exemption{ClientID: a.ID, Identifier: "internal-service"})
		wantErr(t, err, ErrConflict, "internal-service")
		if _, err := db.CreateExemption(ctx, Exemption{ClientID: b.ID, Identifier: "internal-service"}); err != nil {
			t.Fatalf("same identifier for another client: %v", err)
		}

		wantErr(t, db.DeleteExemption(ctx, b.ID, "10.0.0.1"), ErrNotFound, "10.0.0.1")
		if err := db.DeleteExemption(ctx, a.ID, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
		wantErr(t, db.DeleteExemption(ctx, a.ID, "10.0.0.1"), ErrNotFound)
		bList, _ := db.Exemptions(ctx, b.ID)
		aList, _ := db.Exemptions(ctx, a.ID)
		if len(aList) != 1 || len(bList) != 1 || aList[0].ClientID != a.ID || bList[0].ClientID != b.ID {
			t.Errorf("after delete: a has %v, b has %v", aList, bList)
		}

		for _, bad := range []struct {
			e     Exemption
			field string
		}{
			{Exemption{ClientID: a.ID}, "identifier"},
			{Exemption{ClientID: a.ID, Identifier: strings.Repeat("i", 257)}, "identifier"},
			{Exemption{ClientID: a.ID, Identifier: "nul\x00"}, "identifier"},
			{Exemption{ClientID: a.ID, Identifier: "x", Reason: strings.Repeat("r", 1001)}, "reason"},
		} {
			_, err := db.CreateExemption(ctx, bad.e)
			wantErr(t, err, ErrInvalid, bad.field)
		}
		_, err = db.CreateExemption(ctx, Exemption{ClientID: "6f1c1f6e-1d0e-4e5e-9d5e-000000000000", Identifier: "x"})
		wantErr(t, err, ErrNotFound, "client")
	})
}

func TestUsage(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		a := mustCreateClient(t, db, "Alpha")

		const workers, rounds = 8, 15
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					errs <- db.AddUsage(ctx, []Usage{
						{ClientID: a.ID, Allowed: 2, Rejected: 1, ByAlgorithm: map[string]int64{"fixed_window": 3}},
						{ClientID: a.ID, Allowed: 1, ByAlgorithm: map[string]int64{"token_bucket": 1}},
						{ClientID: "someone-else", Allowed: 1, ByAlgorithm: map[string]int64{"token_bucket": 1}},
					})
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("AddUsage: %v", err)
			}
		}
		n := int64(workers * rounds)
		want := Usage{ClientID: a.ID, TotalChecks: 4 * n, Allowed: 3 * n, Rejected: n,
			ByAlgorithm: map[string]int64{"fixed_window": 3 * n, "token_bucket": n}}
		got, err := db.Usage(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Usage (-want +got):\n%s", diff)
		}

		none, err := db.Usage(ctx, "6f1c1f6e-1d0e-4e5e-9d5e-000000000000")
		if err != nil || none.TotalChecks != 0 || len(none.ByAlgorithm) != 0 {
			t.Errorf("Usage(unknown) = %+v, %v; want zero", none, err)
		}

		for _, bad := range [][]Usage{
			{{Allowed: 1}},
			{{ClientID: a.ID, Allowed: -1}},
			{{ClientID: a.ID, Allowed: 1, ByAlgorithm: map[string]int64{"fixed_window": 2}}},
			{{ClientID: a.ID, Allowed: 2, ByAlgorithm: map[string]int64{"fixed_window": 1, "token_bucket": 1}}},
		} {
			wantErr(t, db.AddUsage(ctx, bad), ErrInvalid)
		}
		again, _ := db.Usage(ctx, a.ID)
		if diff := cmp.Diff(want, again); diff != "" {
			t.Errorf("Usage after refused deltas (-want +got):\n%s", diff)
		}
	})
}

func TestRevision(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		rev := func() int64 {
			t.Helper()
			r, err := db.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		last := rev()
		step := func(what string, wantBump bool, err error) {
			t.Helper()
			if wantBump && err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			now := rev()
			if wantBump && now != last+1 {
				t.Errorf("after %s revision = %d, want %d", what, now, last+1)
			}
			if !wantBump && now != last {
				t.Errorf("after %s revision = %d, want unchanged %d", what, now, last)
			}
			last = now
		}
		c, err := db.CreateClient(ctx, Client{Name: "a", Email: "a@example.com"}, keyHash("a"))
		step("CreateClient", true, err)
		_, err = db.CreateClient(ctx, Client{Name: "a", Email: "a@example.com"}, keyHash("a"))
		step("refused CreateClient", false, err)
		_, err = db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		step("CreateRule", true, err)
		_, err = db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		step("duplicate CreateRule", false, err)
		_, err = db.CreateExemption(ctx, Exemption{ClientID: c.ID, Identifier: "x"})
		step("CreateExemption", true, err)
		step("AddUsage", false, db.AddUsage(ctx, []Usage{{ClientID: c.ID, Allowed: 1}}))
		step("DeleteRule", true, db.DeleteRule(ctx, c.ID, "r"))
		step("DeleteRule of nothing", false, db.DeleteRule(ctx, c.ID, "r"))
		step("DeleteExemption", true, db.DeleteExemption(ctx, c.ID, "x"))
	})
}

func TestSnapshot(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		a := mustCreateClient(t, db, "Alpha")
		b := mustCreateClient(t, db, "Beta")
		ra, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "ra", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second},
			Descriptors: []DescriptorEntry{{Key: "k", Value: "v"}}})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := db.CreateRule(ctx, Rule{ClientID: b.ID, Name: "rb", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 9}})
		if err != nil {
			t.Fatal(err)
		}
		ea, err := db.CreateExemption(ctx, Exemption{ClientID: a.ID, Identifier: "ia", Reason: "why"})
		if err != nil {
			t.Fatal(err)
		}
		kb, err := db.CreateKey(ctx, b.ID, ScopeCheck, keyHash("check-Beta"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rev, _ := db.Revision(ctx)
		want := Snapshot{
			Revision:   rev,
			Clients:    []ClientKey{{Client: a, KeyHash: keyHash("key-Alpha")}, {Client: b, KeyHash: keyHash("key-Beta")}},
			Rules:      []Rule{ra, rb},
			Exemptions: []Exemption{ea},
			Overrides:  []Override{},
			Keys:       []Key{kb},
		}
		sortRules := cmpopts.SortSlices(func(x, y Rule) bool { return x.ClientID < y.ClientID })
		if diff := cmp.Diff(want, got, sortRules, cmp.AllowUnexported(Key{})); diff != "" {
			t.Errorf("Snapshot (-want +got):\n%s", diff)
		}
	})
}

// TestCacheSeesOtherReplicas: two stores over one database stand for two
// replicas; what replica 2 writes (clients, rules, exemptions, deletions)
// reaches replica 1's cache through its revision poll. One story in steps,
// each checking the state the one before left, hence its length.
func TestCacheSeesOtherReplicas(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db1 := mustOpen(t, url) // replica 1
		db2 := mustOpen(t, url) // replica 2, same database
		c1 := NewCache(db1, 20*time.Millisecond, nil)
		c2 := NewCache(db2, 20*time.Millisecond, nil)

		a, err := db1.CreateClient(ctx, Client{Name: "Alpha", Email: "alpha@example.com", Domain: "alpha"}, keyHash("key-Alpha"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c1.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := c2.ClientByDomain("alpha"); ok {
			t.Fatal("c2 found a client before loading anything")
		}

		var wg sync.WaitGroup
		for _, c := range []*Cache{c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
		}
		t.Cleanup(wg.Wait) // ctx ends before cleanups run

		eventually(t, "replica 2 to load the client", func() bool {
			_, ok := c2.ClientByKeyHash(keyHash("key-Alpha"))
			return ok
		})
		if got, ok := c2.ClientByDomain("alpha"); !ok || got.ID != a.ID {
			t.Errorf("c2.ClientByDomain = %v, %v", got, ok)
		}
		if got, ok := c2.ClientByID(a.ID); !ok || got.ID != a.ID {
			t.Errorf("c2.ClientByID = %v, %v", got, ok)
		}

		// Writes through replica 2 reach replica 1's cache.
		second, err := db2.CreateRule(ctx, Rule{ClientID: a.ID, Name: "b-second", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute},
			Descriptors: []DescriptorEntry{{Key: "path"}}})
		if err != nil {
			t.Fatal(err)
		}
		first, err := db2.CreateRule(ctx, Rule{ClientID: a.ID, Name: "a-plain", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 5}})
		if err != nil {
			t.Fatal(err)
		}
		third, err := db2.CreateRule(ctx, Rule{ClientID: a.ID, Name: "a-third", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 5},
			Descriptors: []DescriptorEntry{{Key: "user", Value: "vip*"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db2.CreateExemption(ctx, Exemption{ClientID: a.ID, Identifier: "bot"}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replica 1 to see replica 2's writes", func() bool {
			return c1.Exempt(a.ID, "bot")
		})
		if got, ok := c1.Rule(a.ID, "a-plain"); !ok || got.Limit != first.Limit {
			t.Errorf("c1.Rule = %v, %v", got, ok)
		}
		if diff := cmp.Diff([]Rule{second, third}, c1.DescriptorRules(a.ID)); diff != "" {
			t.Errorf("DescriptorRules, creation order (-want +got):\n%s", diff)
		}
		if c1.Exempt(a.ID, "other") || c1.Exempt("someone", "bot") {
			t.Error("Exempt is true for an identifier or client that has no exemption")
		}

		if err := db1.DeleteExemption(ctx, a.ID, "bot"); err != nil {
			t.Fatal(err)
		}
		if err := db1.DeleteRule(ctx, a.ID, "a-plain"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replica 2 to see the deletes", func() bool {
			_, ruleOK := c2.Rule(a.ID, "a-plain")
			return !c2.Exempt(a.ID, "bot") && !ruleOK
		})
		if c1.Revision() < 0 {
			t.Errorf("c1.Revision = %d after loading", c1.Revision())
		}
	})
}

func TestReopenKeepsData(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db, err := Open(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		a := mustCreateClient(t, db, "Alpha")
		r, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "r", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.AddUsage(ctx, []Usage{{ClientID: a.ID, Rejected: 4, ByAlgorithm: map[string]int64{"fixed_window": 4}}}); err != nil {
			t.Fatal(err)
		}
		before, err := db.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		db = mustOpen(t, url)
		after, err := db.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("snapshot after reopen (-before +after):\n%s", diff)
		}
		got, err := db.Rule(ctx, a.ID, "r")
		if err != nil || !cmp.Equal(r, got) {
			t.Errorf("Rule after reopen = %v, %v; want %v", got, err, r)
		}
		u, err := db.Usage(ctx, a.ID)
		if err != nil || u.Rejected != 4 {
			t.Errorf("Usage after reopen = %+v, %v; want 4 rejected", u, err)
		}
	})
}

func TestMigrate(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		version, dirty, err := Migrate(ctx, url, "version")
		if err != nil || version != 0 || dirty {
			t.Fatalf("version of an empty database = %d, %v, %v; want 0, false, nil", version, dirty, err)
		}
		latest := latestMigration(t)
		version, dirty, err = Migrate(ctx, url, "up")
		if err != nil || version != latest || dirty {
			t.Fatalf("up = %d, %v, %v; want %d, false, nil", version, dirty, err, latest)
		}
		if version, _, err = Migrate(ctx, url, "up"); err != nil || version != latest {
			t.Fatalf("up again = %d, %v; want %d, nil", version, err, latest)
		}

		db := mustOpen(t, url)
		mustCreateClient(t, db, "Alpha")

		for want := int(latest) - 1; want >= 0; want-- {
			version, dirty, err = Migrate(ctx, url, "down")
			if err != nil || version != uint(want) || dirty {
				t.Fatalf("down = %d, %v, %v; want %d, false, nil", version, dirty, err, want)
			}
		}
		if _, err := db.Revision(ctx); err == nil {
			t.Error("Revision works after down: the tables are still there")
		}
		if _, _, err := Migrate(ctx, url, "down"); err == nil {
			t.Error("down on an empty schema: want an error")
		}
		version, _, err = Migrate(ctx, url, "up")
		if err != nil || version != latest {
			t.Fatalf("up after down = %d, %v; want %d, nil", version, err, latest)
		}
		rev, err := db.Revision(ctx)
		if err != nil || rev != 0 {
			t.Errorf("Revision after down and up = %d, %v; want 0 (fresh tables)", rev, err)
		}
		if _, err := db.ClientByKeyHash(ctx, keyHash("key-Alpha")); !errors.Is(err, ErrNotFound) {
			t.Errorf("client after down and up: err = %v, want ErrNotFound", err)
		}

		_, _, err = Migrate(ctx, url, "sideways")
		wantErr(t, err, ErrInvalid, "sideways")
	})
}

func TestOpenRefusesBadURLs(t *testing.T) {
	for _, url := range []string{
		"",
		"sqlite://",
		"sqlite:file::memory:?cache=shared",
		"mysql://localhost/throttle",
		"throttle.db",
	} {
		_, err := Open(t.Context(), url, nil)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%q) err = %v, want ErrInvalid", url, err)
		}
	}
	_, err := Open(t.Context(), "postgres://user:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=notanumber", nil)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open(bad postgres URL) err = %v; want an error without the password", err)
	}
}

func TestSQLiteURLForms(t *testing.T) {
	dir := t.TempDir()
	for _, url := range []string{"sqlite://" + dir + "/a.db", "sqlite:" + dir + "/b.db"} {
		db, err := Open(t.Context(), url, nil)
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		if db.Dialect() != DialectSQLite {
			t.Errorf("Dialect = %q", db.Dialect())
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRuleDescriptorsUnique: two rules of one client may not have the same
// descriptors (their Envoy domain would be ambiguous); another client may.
func TestRuleDescriptorsUnique(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a, b := mustCreateClient(t, db, "Alpha"), mustCreateClient(t, db, "Beta")
		match := []DescriptorEntry{{Key: "generic_key", Value: "api"}, {Key: "user_id"}}
		rule := func(client Client, name string, d []DescriptorEntry) error {
			_, err := db.CreateRule(ctx, Rule{ClientID: client.ID, Name: name, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}, Descriptors: d})
			return err
		}
		if err := rule(a, "one", match); err != nil {
			t.Fatal(err)
		}
		err := rule(a, "two", match)
		if !errors.Is(err, ErrDuplicateDescriptors) || !errors.Is(err, ErrConflict) {
			t.Fatalf("same descriptors: err = %v, want ErrDuplicateDescriptors (an ErrConflict)", err)
		}
		for name, d := range map[string][]DescriptorEntry{
			"three": {{Key: "generic_key", Value: "api"}},
			"four":  {{Key: "generic_key", Value: "api"}, {Key: "user_id", Value: "alice"}},
			"five":  nil,
			"six":   nil, // rules without descriptors never conflict
		} {
			if err := rule(a, name, d); err != nil {
				t.Errorf("rule %s: %v", name, err)
			}
		}
		if err := rule(b, "one", match); err != nil {
			t.Errorf("another client's rule with the same descriptors: %v", err)
		}
		_, err = db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "huge", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1 << 32, Window: time.Minute}, Descriptors: []DescriptorEntry{{Key: "k"}}})
		wantErr(t, err, ErrInvalid, "4294967295")
	})
}

// TestUpdateRule: an update replaces everything but the name and creation
// time, bumps the revision, and refuses what CreateRule refuses.
func TestUpdateRule(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a, b := mustCreateClient(t, db, "Alpha"), mustCreateClient(t, db, "Beta")
		orig, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CreateRule(ctx, Rule{ClientID: a.ID, Name: "edge", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute},
			Descriptors: []DescriptorEntry{{Key: "path", Value: "/login"}}}); err != nil {
			t.Fatal(err)
		}
		rev, err := db.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}

		// No algorithm: the client's default (sliding_window).
		got, err := db.UpdateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Limit: 50, Window: time.Hour},
			Descriptors: []DescriptorEntry{{Key: "user_id"}}})
		if err != nil {
			t.Fatalf("UpdateRule: %v", err)
		}
		want := Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 50, Window: time.Hour},
			Descriptors: []DescriptorEntry{{Key: "user_id"}}, CreatedAt: orig.CreatedAt}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("UpdateRule reply (-want +got):\n%s", diff)
		}
		stored, err := db.Rule(ctx, a.ID, "api")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, stored); diff != "" {
			t.Errorf("rule after UpdateRule (-want +got):\n%s", diff)
		}
		if now, err := db.Revision(ctx); err != nil || now != rev+1 {
			t.Errorf("revision after UpdateRule = %d, %v; want %d", now, err, rev+1)
		}

		// Back to no descriptors, as a token bucket.
		got, err = db.UpdateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 7, RefillRate: 0.5}})
		if err != nil {
			t.Fatalf("UpdateRule to a token bucket: %v", err)
		}
		if got.Descriptors != nil || got.Limit.Window != 0 || got.Limit.RefillRate != 0.5 || got.Limit.Algorithm != algorithms.TokenBucket {
			t.Errorf("UpdateRule to a token bucket = %+v", got)
		}

		_, err = db.UpdateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second},
			Descriptors: []DescriptorEntry{{Key: "path", Value: "/login"}}})
		wantErr(t, err, ErrDuplicateDescriptors, "api")
		_, err = db.UpdateRule(ctx, Rule{ClientID: a.ID, Name: "missing", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		wantErr(t, err, ErrNotFound, "missing")
		_, err = db.UpdateRule(ctx, Rule{ClientID: b.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		wantErr(t, err, ErrNotFound, "api")
		_, err = db.UpdateRule(ctx, Rule{ClientID: a.ID, Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 0, Window: time.Second}})
		wantErr(t, err, ErrInvalid, "limit")
		_, err = db.UpdateRule(ctx, Rule{ClientID: "nope", Name: "api", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}})
		wantErr(t, err, ErrNotFound, "client")
		if now, err := db.Revision(ctx); err != nil || now != rev+2 {
			t.Errorf("revision after refused updates = %d, %v; want %d (unchanged)", now, err, rev+2)
		}
	})
}

// TestInMemory: sqlite://:memory: is migrated and keeps what is written for
// as long as the DB is open; two of them are two databases; migrate
// refuses it (the serving process migrates its own).
func TestInMemory(t *testing.T) {
	ctx := t.Context()
	a, err := Open(ctx, "sqlite://:memory:", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, "sqlite://:memory:", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.CreateClient(ctx, Client{Name: "Mem", Email: "mem@example.com"}, keyHash("mem")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // its one connection stays: the data too
		if c, err := a.ClientByKeyHash(ctx, keyHash("mem")); err != nil || c.Name != "Mem" {
			t.Fatalf("read %d of a: %+v, %v", i, c, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.ClientByKeyHash(ctx, keyHash("mem")); !errors.Is(err, ErrNotFound) {
		t.Errorf("b sees a's client: err = %v, want ErrNotFound", err)
	}
	if _, _, err := Migrate(ctx, "sqlite://:memory:", "up"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Migrate(sqlite://:memory:) = %v, want ErrInvalid", err)
	}
}
