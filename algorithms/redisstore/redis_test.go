package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// TestRedisKeysExpire checks that every key an identifier leaves in Redis
// carries a TTL and is gone once its window (or refill) has passed.
func TestRedisKeysExpire(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{}) // real Redis TIME
	ctx := context.Background()
	scope := uniqueScope(t)
	reqs := []algorithms.Request{
		{Key: algorithms.Key{Scope: scope, Identifier: "ttl"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: 300 * time.Millisecond}, Hits: 1},
		{Key: algorithms.Key{Scope: scope, Identifier: "ttl"}, Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 5, Window: 300 * time.Millisecond}, Hits: 1},
		{Key: algorithms.Key{Scope: scope, Identifier: "ttl"}, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 2, RefillRate: 20}, Hits: 2},
		{Key: algorithms.Key{Scope: scope, Identifier: "ttl"}, Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 4, Window: time.Second}, Hits: 3},
	}
	if _, err := s.Check(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	// The index and one state per limit (a window's counter for the window
	// algorithms).
	keys, err := rdb.Keys(ctx, s.identityPrefix(scope, "ttl")+"*").Result()
	if err != nil || len(keys) != 1+len(reqs) {
		t.Fatalf("keys = %v, %v; want the index and %d states", keys, err, len(reqs))
	}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 1100*time.Millisecond {
			t.Errorf("%s: PTTL = %v, want a TTL in (0, 1.1s]", k, ttl)
		}
	}
	// Windows of 300 ms, so that a test machine that stalls this test for a
	// while still finds its keys alive. The sliding window needs its count
	// until the end of the next window: at most 600 ms; the token bucket is
	// full again after 100 ms, and the GCRA's TAT is 750 ms ahead.
	time.Sleep(1200 * time.Millisecond)
	n, err := rdb.Exists(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of %d keys still exist after their windows passed", n, len(keys))
	}
}

// TestRedisPeekWritesNothing: hits=0 leaves no key behind.
func TestRedisPeekWritesNothing(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{})
	ctx := context.Background()
	r := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "peek"}, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 3, Window: time.Minute}}
	if _, err := s.Check(ctx, []algorithms.Request{r}); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, s.identityPrefix(r.Key.Scope, "peek")+"*").Val(); len(keys) != 0 {
		t.Errorf("peek created keys %v, want none", keys)
	}
}

// TestRedisNoScriptFallback: after SCRIPT FLUSH (a Redis restart loses its
// script cache too) a batch still succeeds, through EVAL.
func TestRedisNoScriptFallback(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{})
	ctx := context.Background()
	scope := uniqueScope(t)
	batch := []algorithms.Request{
		{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}, Hits: 1},
		{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 5, Window: time.Minute}, Hits: 1},
		{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 5, Window: time.Minute}, Hits: 1},
		{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 5, Window: time.Minute}, Hits: 1},
	}
	for round := range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ds, err := s.Check(ctx, batch)
		if err != nil {
			t.Fatalf("round %d after SCRIPT FLUSH: %v", round, err)
		}
		for i, d := range ds {
			if !d.Allowed || d.Remaining != int64(4-round) {
				t.Errorf("round %d request %d: %+v, want allowed with %d remaining", round, i, d, 4-round)
			}
		}
	}
}

// TestRedisKeyLayout pins the documented key shape: a hash tag per
// identifier, escaped parts, the algorithm and limit in the name.
func TestRedisKeyLayout(t *testing.T) {
	cases := []struct {
		req  algorithms.Request
		want string
	}{
		{algorithms.Request{Key: algorithms.Key{Scope: "client-1", Identifier: "user_123"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Minute}},
			"throttle:{client-1:user_123}:fw:l:100:60000@60000000"},
		{algorithms.Request{Key: algorithms.Key{Scope: "client-1", Identifier: "user_123", Name: "rule:api"}, Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 100, Window: time.Minute}},
			"throttle:{client-1:user_123}:sw:n:rule:api@60000000"},
		{algorithms.Request{Key: algorithms.Key{Scope: "a:b", Identifier: "c}{%"}, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 10}},
			"throttle:{a%3Ab:c%7D%7B%25}:tb:l:10:0:0.16666666666666666"},
		{algorithms.Request{Key: algorithms.Key{Scope: "client-1", Identifier: "user_123"}, Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 100, Window: time.Minute}},
			"throttle:{client-1:user_123}:gcra:l:100:60000"},
	}
	for _, tc := range cases {
		if got := (&Store{}).stateKey(&tc.req); got != tc.want {
			t.Errorf("stateKey(%+v) = %q, want %q", tc.req.Key, got, tc.want)
		}
	}
	// CACHE_KEY_PREFIX goes first; a window's counter follows its number.
	s := &Store{opts: Options{KeyPrefix: "edge-1:"}}
	r := cases[0].req
	if got, want := s.windowKey(&r, 3*60_000_000+5), "edge-1:throttle:{client-1:user_123}:fw:l:100:60000@60000000:3"; got != want {
		t.Errorf("windowKey = %q, want %q", got, want)
	}
}

// TestRedisIndexOutlivesState: Reset finds a state through the identifier's
// index even after the state's TTL grew past the index's first TTL (a sliding
// window moving on, a token bucket drained again).
func TestRedisIndexOutlivesState(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{}) // real Redis TIME and TTLs
	ctx := context.Background()
	cases := []struct {
		name  string
		limit algorithms.Limit
		first int64
		wait  time.Duration // before the second write
		then  int64
		check time.Duration // after the second write: past the first TTL, within the second
	}{
		// Writes 10 ms into window k and 60 ms into window k+1: the state
		// lives until k+3 starts (600 ms), the first index TTL ended at k+2
		// (400 ms); checked at 480 ms.
		{"sliding window", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 100, Window: 200 * time.Millisecond}, 1, 250 * time.Millisecond, 1, 220 * time.Millisecond},
		{"token bucket", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 10, RefillRate: 10}, 1, 500 * time.Millisecond, 10, 700 * time.Millisecond},
		// TAT 500 ms ahead after the first write (state and index TTL),
		// 200 + 800 ms at the second, 300 ms later; checked at 1000 ms.
		{"gcra", algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 10, Window: time.Second}, 5, 300 * time.Millisecond, 8, 700 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := algorithms.Key{Scope: uniqueScope(t), Identifier: "idx"}
			if w := tc.limit.Window; tc.limit.Algorithm == algorithms.SlidingWindow {
				// Start 10 ms into a window, by Redis's clock.
				now, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(w - time.Duration(now.UnixNano())%w + 10*time.Millisecond)
			}
			for i, hits := range []int64{tc.first, tc.then} {
				ds, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: tc.limit, Hits: hits}})
				if err != nil || !ds[0].Allowed {
					t.Fatalf("check: %v %v", ds, err)
				}
				if i == 0 {
					time.Sleep(tc.wait)
				}
			}
			time.Sleep(tc.check)
			if n := len(rdb.Keys(ctx, s.stateKey(&algorithms.Request{Key: key, Limit: tc.limit})+"*").Val()); n != 1 {
				t.Fatalf("state gone before the check (timing too slow here?)")
			}
			n, err := s.Reset(ctx, key.Scope, key.Identifier, "")
			if err != nil || n != 1 {
				t.Errorf("Reset = %d, %v; want 1: the index expired before the state it lists", n, err)
			}
		})
	}
}

// TestRedisCluster runs the conformance suite on a real three-node Redis
// Cluster: every request's keys share a hash tag and so a slot; a batch is
// one script call (or one pipeline of plain counters) per master it
// touches, coalesced per master.
func TestRedisCluster(t *testing.T) {
	rdb := newClusterClient(t)
	storetest.Contract(t, []storetest.Factory{{Name: "redis-cluster", New: func(t *testing.T, clock func() time.Time) algorithms.Store {
		s := New(rdb, Options{Now: clock, Coalesce: 2})
		t.Cleanup(s.Close)
		if !s.route.cluster() {
			t.Fatal("a Cluster store must route by master")
		}
		return s
	}, Sweep: sweeper}, {Name: "redis-cluster-unindexed", Unindexed: true, New: func(t *testing.T, clock func() time.Time) algorithms.Store {
		// Windows counted first (plain.go) on every master.
		s := New(rdb, Options{Now: clock, Coalesce: 2})
		t.Cleanup(s.Close)
		return storetest.Unindexed(s)
	}, Sweep: sweeper}})

	// The keys of a batch really are spread over the nodes.
	ctx := context.Background()
	s := New(rdb, Options{})
	t.Cleanup(s.Close)
	scope := uniqueScope(t)
	var batch []algorithms.Request
	for i := range 30 {
		batch = append(batch, algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "user-" + strconv.Itoa(i)}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}, Hits: 1})
	}
	ds, err := s.Check(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]bool{}
	for i, d := range ds {
		if !d.Allowed {
			t.Errorf("request %d denied", i)
		}
		key := s.stateKey(&batch[i])
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); int64(got) != slot {
			t.Errorf("keySlot(%q) = %d, Redis says %d", key, got, slot)
		}
		slots[slot] = true
	}
	if len(slots) < 10 {
		t.Errorf("30 identifiers fell in only %d slots", len(slots))
	}
	if parts := s.route.split(batch, nil); len(parts) != 3 {
		t.Errorf("30 identifiers split over %d masters, want 3", len(parts))
	}
}

// TestRedisUnindexed: a state that is never reset keeps no index entry,
// still has its TTL, and decides exactly as an indexed one.
func TestRedisUnindexed(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{})
	ctx := context.Background()
	scope := uniqueScope(t)
	for _, l := range []algorithms.Limit{
		{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute},
		{Algorithm: algorithms.SlidingWindow, Limit: 3, Window: time.Minute},
		{Algorithm: algorithms.TokenBucket, Limit: 3, Window: time.Minute},
		{Algorithm: algorithms.GCRA, Limit: 3, Window: time.Minute},
	} {
		indexed := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "indexed"}, Limit: l, Hits: 1}
		unindexed := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "unindexed"}, Limit: l, Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund}
		for i := range 5 {
			ds, err := s.Check(ctx, []algorithms.Request{indexed, unindexed})
			if err != nil {
				t.Fatal(err)
			}
			a, b := ds[0], ds[1]
			if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.RetryAfter != b.RetryAfter {
				t.Errorf("%s check %d: indexed %+v, unindexed %+v", l.Algorithm, i, a, b)
			}
		}
		if n := rdb.Exists(ctx, s.indexKey(scope, "unindexed")).Val(); n != 0 {
			t.Errorf("%s: an unindexed state has an index key", l.Algorithm)
		}
		// The sliding window keeps its count through the next window.
		keys := rdb.Keys(ctx, s.stateKey(&unindexed)+"*").Val()
		if len(keys) != 1 {
			t.Fatalf("%s: unindexed state keys %v, want one", l.Algorithm, keys)
		}
		if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= 0 || ttl > 2*time.Minute {
			t.Errorf("%s: unindexed state PTTL = %v, want (0, 2m]", l.Algorithm, ttl)
		}
		if n := rdb.Exists(ctx, s.indexKey(scope, "indexed")).Val(); n != 1 {
			t.Errorf("%s: the indexed state has no index key", l.Algorithm)
		}
	}
}
