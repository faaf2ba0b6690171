package algorithms

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestMemorySweepBoundsState: state of identifiers whose windows have passed
// is dropped by Sweep, so memory follows only the active identifiers.
func TestMemorySweepBoundsState(t *testing.T) {
	clock := &fakeClock{now: t0}
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	ctx := context.Background()
	limits := []Limit{
		{Algorithm: FixedWindow, Limit: 5, Window: time.Second},
		{Algorithm: SlidingWindow, Limit: 5, Window: time.Second},
		{Algorithm: TokenBucket, Limit: 5, RefillRate: 5},
		{Algorithm: GCRA, Limit: 5, Window: time.Second},
	}
	for i := range 4000 {
		if _, err := s.Check(ctx, []Request{{Key: Key{"s", "id-" + strconv.Itoa(i), ""}, Limit: limits[i%4], Hits: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got != 4000 {
		t.Fatalf("Len = %d, want 4000", got)
	}
	clock.Advance(1500 * time.Millisecond) // fixed windows over; sliding still weighs
	s.Sweep()
	if got := s.Len(); got != 1000 {
		t.Errorf("after 1.5 s: Len = %d, want 1000 (the sliding windows)", got)
	}
	clock.Advance(time.Second)
	s.Sweep()
	if got := s.Len(); got != 0 {
		t.Errorf("after 2.5 s: Len = %d, want 0", got)
	}
}

// TestMemoryRunStopsWithContext: the sweeper goroutine ends with its owner.
func TestMemoryRunStopsWithContext(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{SweepEvery: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
