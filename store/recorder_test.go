package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestUsageRecorder(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		a := mustCreateClient(t, db, "Alpha")
		b := mustCreateClient(t, db, "Beta")
		rec := NewUsageRecorder(db, time.Hour, nil)

		const goroutines, records = 50, 200
		algorithms := []string{FixedWindow, SlidingWindow, TokenBucket}
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
					rec.Record(client, algorithms[i%3], i%4 != 0)
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
				ByAlgorithm: map[string]int64{FixedWindow: 25 * 67, SlidingWindow: 25 * 67, TokenBucket: 25 * 66}}
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

		// A flush that fails keeps its counts.
		rec.Record(a.ID, FixedWindow, true)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		if err := rec.Flush(canceled); err == nil {
			t.Fatal("Flush with a canceled context: want an error")
		}
		rec.Record(a.ID, FixedWindow, true)
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
			rec.Record(a.ID, TokenBucket, i < 7)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		got, err := db.Usage(t.Context(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := Usage{ClientID: a.ID, TotalChecks: 10, Allowed: 7, Rejected: 3, ByAlgorithm: map[string]int64{TokenBucket: 10}}
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
			rec.Record(ids[i%len(ids)], FixedWindow, true)
			i++
		}
	})
}
