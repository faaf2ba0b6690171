package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestUsageRecorder: decisions recorded from 50 goroutines while flushes
// run are neither lost nor doubled, per client and per identifier, and a
// failed flush keeps its counts. One story in steps, each checking the state
// the one before left, hence its length.
func TestUsageRecorder(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a := mustCreateClient(t, db, "Alpha")
		b := mustCreateClient(t, db, "Beta")
		rec := NewUsageRecorder(db, time.Hour, nil)

		const goroutines, records = 50, 200
		algorithms := []string{"fixed_window", "sliding_window", "token_bucket"}
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < records; i++ {
					client := a.ID
					if g%2 == 1 {
						client = b.ID
					}
					rec.Record(client, fmt.Sprint("user-", i%7), algorithms[i%3], i%4 != 0)
				}
			}()
		}
		// Flushes while recording must not lose or double anything.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				if err := rec.Flush(ctx); err != nil {
					t.Errorf("Flush: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		wg.Wait()

		// Per client: 25 goroutines × 200 records; i%4==0 rejected.
		perClient := int64(goroutines / 2 * records)
		want := func(id string) Usage {
			return Usage{ClientID: id, TotalChecks: perClient, Allowed: perClient * 3 / 4, Rejected: perClient / 4,
				ByAlgorithm: map[string]int64{"fixed_window": 25 * 67, "sliding_window": 25 * 67, "token_bucket": 25 * 66}}
		}
		check := func(when string, get func(string) (Usage, error)) {
			t.Helper()
			for _, id := range []string{a.ID, b.ID} {
				got, err := get(id)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if diff := cmp.Diff(want(id), got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", when, diff)
				}
			}
		}
		recUsage := func(id string) (Usage, error) { return rec.Usage(ctx, id) }
		dbUsage := func(id string) (Usage, error) { return db.Usage(ctx, id) }
		check("recorder usage before the last flush", recUsage)
		// Per identifier too: nothing lost or doubled under concurrency.
		for _, id := range []string{a.ID, b.ID} {
			top, err := rec.TopIdentifiers(ctx, id, 10)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, u := range top {
				sum += u.Total()
			}
			if len(top) != 7 || sum != perClient {
				t.Errorf("top identifiers of %s: %d identifiers, %d checks; want 7, %d", id, len(top), sum, perClient)
			}
		}

		// A flush that fails keeps its counts.
		rec.Record(a.ID, "user-0", "fixed_window", true)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		if err := rec.Flush(canceled); err == nil {
			t.Fatal("Flush with a canceled context: want an error")
		}
		rec.Record(a.ID, "user-0", "fixed_window", true)
		if err := rec.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := db.Usage(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.TotalChecks != perClient+2 || got.Allowed != perClient*3/4+2 {
			t.Errorf("after a failed then a good flush: %+v, want %d checks", got, perClient+2)
		}
		gotB, err := dbUsage(b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want(b.ID), gotB); diff != "" {
			t.Errorf("db usage of b after flush (-want +got):\n%s", diff)
		}
	})
}

func TestUsageRecorderRunFlushesOnStop(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		a := mustCreateClient(t, db, "Alpha")
		rec := NewUsageRecorder(db, time.Hour, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- rec.Run(ctx) }()
		for i := 0; i < 10; i++ {
			rec.Record(a.ID, "u", "token_bucket", i < 7)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		got, err := db.Usage(t.Context(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := Usage{ClientID: a.ID, TotalChecks: 10, Allowed: 7, Rejected: 3, ByAlgorithm: map[string]int64{"token_bucket": 10}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("usage after Run stopped (-want +got):\n%s", diff)
		}
	})
}

func BenchmarkRecord(b *testing.B) {
	rec := NewUsageRecorder(nil, time.Hour, nil)
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%d", i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			rec.Record(ids[i%len(ids)], "u", "fixed_window", true)
			i++
		}
	})
}

// TestTopIdentifiers follows one client's per-identifier counts from
// unflushed through a failed and a good flush to pruned, with the order
// /stats shows them in and another client's kept apart. One story in steps,
// each checking the state the one before left, hence its length.
func TestTopIdentifiers(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a, b := mustCreateClient(t, db, "Alpha"), mustCreateClient(t, db, "Beta")
		rec := NewUsageRecorder(db, time.Hour, nil)
		record := func(client Client, identifier string, allowed, rejected int) {
			for range allowed {
				rec.Record(client.ID, identifier, "fixed_window", true)
			}
			for range rejected {
				rec.Record(client.ID, identifier, "fixed_window", false)
			}
		}
		record(a, "alice", 3, 2)
		record(a, "bob", 4, 0)
		record(a, "carol", 0, 1)
		record(a, "dave", 4, 0) // ties with bob: by identifier
		record(b, "alice", 10, 0)
		record(a, "", 1, 0)                       // no identifier: totals only
		record(a, strings.Repeat("x", 257), 1, 0) // too long for an identifier row

		counts := func(list []IdentifierUsage) []IdentifierUsage {
			out := make([]IdentifierUsage, len(list))
			for i, u := range list {
				if u.ClientID != a.ID || time.Since(u.LastSeen) > time.Minute || u.LastSeen.After(time.Now()) {
					t.Errorf("%s: client %q, last seen %v; want %s, about now", u.Identifier, u.ClientID, u.LastSeen, a.ID)
				}
				out[i] = IdentifierUsage{Identifier: u.Identifier, Allowed: u.Allowed, Rejected: u.Rejected}
			}
			return out
		}
		want := []IdentifierUsage{
			{Identifier: "alice", Allowed: 3, Rejected: 2},
			{Identifier: "bob", Allowed: 4},
			{Identifier: "dave", Allowed: 4},
			{Identifier: "carol", Rejected: 1},
		}
		top := func(when string, get func(string, int) ([]IdentifierUsage, error), n int, want []IdentifierUsage) {
			t.Helper()
			got, err := get(a.ID, n)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if diff := cmp.Diff(want, counts(got)); diff != "" {
				t.Errorf("%s, top %d (-want +got):\n%s", when, n, diff)
			}
		}
		recTop := func(id string, n int) ([]IdentifierUsage, error) { return rec.TopIdentifiers(ctx, id, n) }
		dbTop := func(id string, n int) ([]IdentifierUsage, error) { return db.TopIdentifiers(ctx, id, n) }
		top("before a flush", recTop, 10, want)
		top("before a flush", recTop, 2, want[:2])
		top("before a flush", recTop, 0, []IdentifierUsage{})
		top("database before a flush", dbTop, 10, []IdentifierUsage{})
		if u, err := rec.Usage(ctx, a.ID); err != nil || u.TotalChecks != 16 {
			t.Errorf("usage of a = %+v, %v; want 16 checks (those without an identifier row too)", u, err)
		}

		// A failed flush keeps the counts; a good one stores them.
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		if err := rec.Flush(canceled); err == nil {
			t.Fatal("Flush with a canceled context: want an error")
		}
		top("after a failed flush", recTop, 10, want)
		if err := rec.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		top("database after a flush", dbTop, 10, want)
		top("after a flush", recTop, 10, want)

		// Unflushed counts lift an identifier past stored ones.
		record(a, "carol", 6, 0)
		record(a, "erin", 0, 4)
		want = []IdentifierUsage{
			{Identifier: "carol", Allowed: 6, Rejected: 1},
			{Identifier: "alice", Allowed: 3, Rejected: 2},
			{Identifier: "erin", Rejected: 4},
		}
		top("stored and unflushed", recTop, 3, want)
		if err := rec.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		top("database after the second flush", dbTop, 3, want)

		// Another client's identifiers are its own.
		gotB, err := rec.TopIdentifiers(ctx, b.ID, 10)
		if err != nil || len(gotB) != 1 || gotB[0].Identifier != "alice" || gotB[0].Allowed != 10 {
			t.Errorf("top identifiers of b = %+v, %v; want alice with 10", gotB, err)
		}

		// Pruning deletes identifiers unseen since the cut-off only.
		if n, err := db.PruneIdentifierUsage(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
			t.Errorf("prune of an hour ago = %d, %v; want 0", n, err)
		}
		if n, err := db.PruneIdentifierUsage(ctx, time.Now().Add(time.Hour)); err != nil || n != 6 {
			t.Errorf("prune of all = %d, %v; want 6 rows (5 of a, 1 of b)", n, err)
		}
		top("after pruning", dbTop, 10, []IdentifierUsage{})
	})
}

// TestTopIdentifiersBounded: one client's identifiers beyond
// MaxIdentifiersPerFlush between two flushes count in its totals only.
func TestTopIdentifiersBounded(t *testing.T) {
	db := mustOpen(t, sqliteURL(t))
	ctx := t.Context()
	c := mustCreateClient(t, db, "Alpha")
	rec := NewUsageRecorder(db, time.Hour, nil)
	for i := range MaxIdentifiersPerFlush + 5 {
		rec.Record(c.ID, fmt.Sprint("user-", i), "fixed_window", true)
	}
	rec.Record(c.ID, "user-0", "fixed_window", false) // an identifier already counted still counts
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var rows, sum int64
	if err := db.sql.QueryRowContext(ctx, `SELECT count(*), sum(allowed + rejected) FROM identifier_usage`).Scan(&rows, &sum); err != nil {
		t.Fatal(err)
	}
	if rows != MaxIdentifiersPerFlush || sum != MaxIdentifiersPerFlush+1 {
		t.Errorf("identifier rows = %d with %d checks, want %d with %d", rows, sum, MaxIdentifiersPerFlush, MaxIdentifiersPerFlush+1)
	}
	if u, err := db.Usage(ctx, c.ID); err != nil || u.TotalChecks != MaxIdentifiersPerFlush+6 {
		t.Errorf("usage = %+v, %v; want %d checks", u, err, MaxIdentifiersPerFlush+6)
	}
	// The next interval tracks new identifiers again.
	rec.Record(c.ID, "late", "fixed_window", true)
	if top, err := rec.TopIdentifiers(ctx, c.ID, 1); err != nil || len(top) != 1 || top[0].Identifier != "user-0" {
		t.Errorf("top 1 = %+v, %v; want user-0", top, err)
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.identifierUsage(ctx, c.ID, []string{"late"}); err != nil || len(got) != 1 {
		t.Errorf("late identifier after the next flush = %+v, %v", got, err)
	}
}
