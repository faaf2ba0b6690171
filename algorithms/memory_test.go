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

// TestMemoryKeyMatchesStateName: two requests share state in memory exactly
// when they have one identifier and one StateName (as they share a Redis
// key exactly then), and equal keys hash alike.
func TestMemoryKeyMatchesStateName(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	fw := Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Minute}
	reqs := []Request{
		{Key: Key{"s", "bob", ""}, Limit: fw},
		{Key: Key{"s", "bob", ""}, Limit: fw, Hits: 3}, // hits are not part of the key
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Minute + 500*time.Microsecond}}, // same whole ms
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Minute + time.Millisecond}},
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 11, Window: time.Minute}},
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: SlidingWindow, Limit: 10, Window: time.Minute}},
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: GCRA, Limit: 10, Window: time.Minute}},
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 60, Window: time.Minute}},
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 60, Window: time.Minute, RefillRate: 1}}, // the default rate, given
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 60, Window: time.Minute, RefillRate: 2}},
		{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 60, RefillRate: 1}},
		{Key: Key{"s", "bob", "r"}, Limit: fw},
		{Key: Key{"s", "bob", "r"}, Limit: Limit{Algorithm: FixedWindow, Limit: 99, Window: time.Hour}}, // a name is the key
		{Key: Key{"s", "bob", "r"}, Limit: Limit{Algorithm: GCRA, Limit: 10, Window: time.Minute}},
		{Key: Key{"s", "bob", "r2"}, Limit: fw},
		{Key: Key{"s", "bo", ""}, Limit: fw},
		{Key: Key{"s", "bob:1", ""}, Limit: fw},
		{Key: Key{"s:bob", "1", ""}, Limit: fw},
		{Key: Key{"t", "bob", ""}, Limit: fw},
		{Key: Key{"bob", "s", ""}, Limit: fw},
		{Key: Key{"s", "s", ""}, Limit: fw},
		{Key: Key{"bob", "bob", ""}, Limit: fw},
	}
	stateKey := func(r Request) string {
		return EscapeKeyPart(r.Key.Scope) + ":" + EscapeKeyPart(r.Key.Identifier) + ":" + StateName(&r)
	}
	for i := range reqs {
		for j := range reqs {
			var pi, pj spot
			s.place(&reqs[i], &pi)
			s.place(&reqs[j], &pj)
			ki := memoryKeyOf(&reqs[i].Key, &pi.lk)
			same := ki.is(&reqs[j].Key, &pj.lk)
			if got, want := same, stateKey(reqs[i]) == stateKey(reqs[j]); got != want {
				t.Errorf("requests %d and %d: same memory key %v, same state name %v (%q, %q)", i, j, got, want, stateKey(reqs[i]), stateKey(reqs[j]))
			}
			if same && (pi.h != pj.h || pi.sh != pj.sh) {
				t.Errorf("requests %d and %d: equal keys, hashes %x and %x, shards %d and %d", i, j, pi.h, pj.h, pi.sh.index, pj.sh.index)
			}
			if hi, hj := pi.h, pj.h; !same && hi == hj {
				t.Errorf("requests %d and %d: different keys share hash %x", i, j, hi)
			}
		}
	}
}

// TestMemoryHashChain: keys that share a hash are chained, and each is
// found, kept, swept and reset on its own. Seeded hashes make such keys
// rare and impossible to choose, so this drives the shard directly.
func TestMemoryHashChain(t *testing.T) {
	clock := &fakeClock{now: t0}
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, Shards: 1})
	sh := &s.shards[0]
	const h = 42
	nowUS := t0.UnixMicro()
	fw := limitKey{alg: fixedWindowN, limit: 1, windowMS: 1000}
	keys := []struct {
		key Key
		lk  limitKey
	}{
		{Key{"s", "a", ""}, fw},
		{Key{"s", "b", ""}, fw},
		{Key{"s", "a", "r"}, limitKey{alg: gcraN}},
		{Key{"s", "c", ""}, fw},
	}
	for i, k := range keys {
		expires := nowUS + 10_000_000
		if i == 1 {
			expires = nowUS + 1 // b expires first
		}
		sh.entry(sh.find(&k.key, &k.lk, h), &k.key, &k.lk, h).state = memoryState{window: windowState{count: int64(i)}, expiresUS: expires}
	}
	check := func(when string, want map[int]bool) {
		t.Helper()
		for i, k := range keys {
			e := sh.find(&k.key, &k.lk, h)
			if (e != nil) != want[i] {
				t.Errorf("%s: key %d found %v, want %v", when, i, e != nil, want[i])
			} else if e != nil && e.state.window.count != int64(i) {
				t.Errorf("%s: key %d holds the state of key %d", when, i, e.state.window.count)
			}
		}
		if got := s.Len(); got != len(want) {
			t.Errorf("%s: Len = %d, want %d", when, got, len(want))
		}
	}
	check("after puts", map[int]bool{0: true, 1: true, 2: true, 3: true})
	// Overwriting one entry leaves the others alone.
	k0 := keys[0]
	sh.entry(sh.find(&k0.key, &k0.lk, h), &k0.key, &k0.lk, h).state = memoryState{window: windowState{count: 0}, expiresUS: nowUS + 10_000_000}
	check("after an overwrite", map[int]bool{0: true, 1: true, 2: true, 3: true})

	clock.Advance(time.Millisecond)
	s.Sweep()
	check("after a sweep", map[int]bool{0: true, 2: true, 3: true})

	n, err := s.Reset(context.Background(), "s", "a", GCRA)
	if err != nil || n != 1 {
		t.Fatalf("Reset(s, a, gcra) = %d, %v; want 1, nil", n, err)
	}
	check("after Reset(a, gcra)", map[int]bool{0: true, 3: true})
	n, err = s.Reset(context.Background(), "s", "a", "")
	if err != nil || n != 1 {
		t.Fatalf("Reset(s, a) = %d, %v; want 1, nil", n, err)
	}
	check("after Reset(a)", map[int]bool{3: true})
	n, err = s.Reset(context.Background(), "s", "c", "")
	if err != nil || n != 1 {
		t.Fatalf("Reset(s, c) = %d, %v; want 1, nil", n, err)
	}
	check("after Reset(c)", map[int]bool{})
	if len(sh.states) != 0 {
		t.Errorf("an empty chain is still in the map: %d hashes", len(sh.states))
	}
}

// TestMemoryClockNeverRunsBackwards: the clock is read once per batch,
// before the shard's lock, so a batch can reach a shard after one that read
// a later time; it is decided at that later time, never against a newer
// window's state as if that were stale. A clock going back stands for it.
func TestMemoryClockNeverRunsBackwards(t *testing.T) {
	clock := &fakeClock{now: t0.Add(time.Minute)} // the start of a window
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	ctx := context.Background()
	req := []Request{{Key: Key{"s", "bob", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 1, Window: time.Minute}, Hits: 1}}
	if ds, err := s.Check(ctx, req); err != nil || !ds[0].Allowed {
		t.Fatalf("first request: %v, %v; want allowed", ds, err)
	}
	clock.Advance(-time.Millisecond) // back into the previous window
	ds, err := s.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := Decision{Allowed: false, Limit: 1, Remaining: 0, ResetAfter: time.Minute, RetryAfter: time.Minute, Now: t0.Add(time.Minute)}
	if ds[0] != want {
		t.Errorf("request at an earlier time: %+v, want %+v (decided at the later time, the limit spent)", ds[0], want)
	}
}

// TestMemoryWallClock: the default clock reads time.Now when it has no
// anchor or an old one, and keeps that reading as its anchor; with a recent
// anchor it gives the anchor's wall time plus the monotonic time since.
func TestMemoryWallClock(t *testing.T) {
	var c wallClock
	// between checks a reading that time.Now made, between before and after.
	between := func(when string, before time.Time, got int64, after time.Time) {
		t.Helper()
		if got < before.UnixMicro() || got > after.UnixMicro() {
			t.Errorf("%s: %d µs, want between %d and %d", when, got, before.UnixMicro(), after.UnixMicro())
		}
		if a := c.anchor.Load(); a == nil || a.wallNS/1000 != got {
			t.Errorf("%s: the anchor is %+v, want one at %d µs", when, a, got)
		}
	}
	before := time.Now()
	got := c.nowUS()
	between("first reading", before, got, time.Now())

	// A recent anchor is used as it is: a wall time of 5 s after the epoch.
	mono := time.Now()
	c.anchor.Store(&clockAnchor{mono: mono, wallNS: 5e9})
	lo := (5e9 + int64(time.Since(mono))) / 1000
	got = c.nowUS()
	hi := (5e9 + int64(time.Since(mono))) / 1000
	if got < lo || got > hi {
		t.Errorf("with an anchor at 5 s: %d µs, want between %d and %d", got, lo, hi)
	}

	// An old one is replaced by a time.Now reading.
	c.anchor.Store(&clockAnchor{mono: time.Now().Add(-reanchorEvery), wallNS: 5e9})
	before = time.Now()
	got = c.nowUS()
	between("with an old anchor", before, got, time.Now())
}

// TestMemoryGCRAUnitsMemo: a shard's memo of GCRA units gives gcraUnits'
// answer whichever limit came before.
func TestMemoryGCRAUnitsMemo(t *testing.T) {
	sh := &NewMemoryStore(MemoryOptions{Shards: 1}).shards[0]
	limits := [][2]int64{{10, 60_000_000}, {10, 60_000_000}, {7, 1_000}, {1_000_000_000, 3_600_000_000}, {7, 1_000}, {10, 1_000}}
	for _, l := range limits {
		p, c := sh.gcraUnits(l[0], l[1])
		wp, wc := gcraUnits(l[0], l[1])
		if p != wp || c != wc {
			t.Errorf("units of %d per %d µs: %d, %d; want %d, %d", l[0], l[1], p, c, wp, wc)
		}
	}
}
