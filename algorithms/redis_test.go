package algorithms

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/throttle-rl/throttle/internal/redistest"
)

// TestRedisKeysExpire checks that every key an identifier leaves in Redis
// carries a TTL and is gone once its window (or refill) has passed.
func TestRedisKeysExpire(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := NewRedisStore(rdb, RedisOptions{}) // real Redis TIME
	ctx := context.Background()
	scope := uniqueScope(t)
	reqs := []Request{
		{Key: Key{scope, "ttl", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 5, Window: 300 * time.Millisecond}, Hits: 1},
		{Key: Key{scope, "ttl", ""}, Limit: Limit{Algorithm: SlidingWindow, Limit: 5, Window: 300 * time.Millisecond}, Hits: 1},
		{Key: Key{scope, "ttl", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 2, RefillRate: 20}, Hits: 2},
		{Key: Key{scope, "ttl", ""}, Limit: Limit{Algorithm: GCRA, Limit: 4, Window: time.Second}, Hits: 3},
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
	s := NewRedisStore(rdb, RedisOptions{})
	ctx := context.Background()
	r := Request{Key: Key{uniqueScope(t), "peek", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 3, Window: time.Minute}}
	if _, err := s.Check(ctx, []Request{r}); err != nil {
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
	s := NewRedisStore(rdb, RedisOptions{})
	ctx := context.Background()
	scope := uniqueScope(t)
	batch := []Request{
		{Key: Key{scope, "a", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 5, Window: time.Minute}, Hits: 1},
		{Key: Key{scope, "a", ""}, Limit: Limit{Algorithm: SlidingWindow, Limit: 5, Window: time.Minute}, Hits: 1},
		{Key: Key{scope, "a", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 5, Window: time.Minute}, Hits: 1},
		{Key: Key{scope, "a", ""}, Limit: Limit{Algorithm: GCRA, Limit: 5, Window: time.Minute}, Hits: 1},
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
		req  Request
		want string
	}{
		{Request{Key: Key{"client-1", "user_123", ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 100, Window: time.Minute}},
			"throttle:{client-1:user_123}:fw:l:100:60000@60000000"},
		{Request{Key: Key{"client-1", "user_123", "rule:api"}, Limit: Limit{Algorithm: SlidingWindow, Limit: 100, Window: time.Minute}},
			"throttle:{client-1:user_123}:sw:n:rule:api@60000000"},
		{Request{Key: Key{"a:b", "c}{%", ""}, Limit: Limit{Algorithm: TokenBucket, Limit: 10}},
			"throttle:{a%3Ab:c%7D%7B%25}:tb:l:10:0:0.16666666666666666"},
		{Request{Key: Key{"client-1", "user_123", ""}, Limit: Limit{Algorithm: GCRA, Limit: 100, Window: time.Minute}},
			"throttle:{client-1:user_123}:gcra:l:100:60000"},
	}
	for _, tc := range cases {
		if got := (&RedisStore{}).stateKey(&tc.req); got != tc.want {
			t.Errorf("stateKey(%+v) = %q, want %q", tc.req.Key, got, tc.want)
		}
	}
	// CACHE_KEY_PREFIX goes first; a window's counter follows its number.
	s := &RedisStore{opts: RedisOptions{KeyPrefix: "edge-1:"}}
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
	s := NewRedisStore(rdb, RedisOptions{}) // real Redis TIME and TTLs
	ctx := context.Background()
	cases := []struct {
		name  string
		limit Limit
		first int64
		wait  time.Duration // before the second write
		then  int64
		check time.Duration // after the second write: past the first TTL, within the second
	}{
		// Writes 10 ms into window k and 60 ms into window k+1: the state
		// lives until k+3 starts (600 ms), the first index TTL ended at k+2
		// (400 ms); checked at 480 ms.
		{"sliding window", Limit{Algorithm: SlidingWindow, Limit: 100, Window: 200 * time.Millisecond}, 1, 250 * time.Millisecond, 1, 220 * time.Millisecond},
		{"token bucket", Limit{Algorithm: TokenBucket, Limit: 10, RefillRate: 10}, 1, 500 * time.Millisecond, 10, 700 * time.Millisecond},
		// TAT 500 ms ahead after the first write (state and index TTL),
		// 200 + 800 ms at the second, 300 ms later; checked at 1000 ms.
		{"gcra", Limit{Algorithm: GCRA, Limit: 10, Window: time.Second}, 5, 300 * time.Millisecond, 8, 700 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := Key{Scope: uniqueScope(t), Identifier: "idx"}
			if w := tc.limit.Window; tc.limit.Algorithm == SlidingWindow {
				// Start 10 ms into a window, by Redis's clock.
				now, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(w - time.Duration(now.UnixNano())%w + 10*time.Millisecond)
			}
			for i, hits := range []int64{tc.first, tc.then} {
				ds, err := s.Check(ctx, []Request{{Key: key, Limit: tc.limit, Hits: hits}})
				if err != nil || !ds[0].Allowed {
					t.Fatalf("check: %v %v", ds, err)
				}
				if i == 0 {
					time.Sleep(tc.wait)
				}
			}
			time.Sleep(tc.check)
			if n := len(rdb.Keys(ctx, s.stateKey(&Request{Key: key, Limit: tc.limit})+"*").Val()); n != 1 {
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
	addrs := redistest.StartCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	cluster := []storeFactory{{"redis-cluster", func(t *testing.T, clock func() time.Time) Store {
		s := NewRedisStore(rdb, RedisOptions{Now: clock, Coalesce: 2})
		t.Cleanup(s.Close)
		if s.cluster == nil || s.single != nil {
			t.Fatal("a Cluster store must route by master")
		}
		return s
	}}, {"redis-cluster-unindexed", func(t *testing.T, clock func() time.Time) Store {
		// Fixed windows without the script (plain.go) on every master.
		s := NewRedisStore(rdb, RedisOptions{Now: clock, Coalesce: 2})
		t.Cleanup(s.Close)
		return unindexedStore{s}
	}}}
	t.Run("conformance", func(t *testing.T) { conformance(t, cluster) })
	t.Run("batch", func(t *testing.T) { conformanceBatch(t, cluster) })
	t.Run("isolation", func(t *testing.T) { conformanceIsolation(t, cluster) })
	t.Run("reset", func(t *testing.T) { conformanceReset(t, cluster) })
	t.Run("invalid", func(t *testing.T) { conformanceInvalid(t, cluster) })
	t.Run("all or nothing", func(t *testing.T) { conformanceAllOrNothing(t, cluster) })
	t.Run("always count", func(t *testing.T) { conformanceAlwaysCount(t, cluster) })
	t.Run("clear", func(t *testing.T) { conformanceClear(t, cluster) })

	// The keys of a batch really are spread over the nodes.
	ctx := context.Background()
	s := NewRedisStore(rdb, RedisOptions{})
	t.Cleanup(s.Close)
	scope := uniqueScope(t)
	var batch []Request
	for i := range 30 {
		batch = append(batch, Request{Key: Key{scope, "user-" + strconv.Itoa(i), ""}, Limit: Limit{Algorithm: FixedWindow, Limit: 1, Window: time.Minute}, Hits: 1})
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
	if parts := s.split(batch, nil); len(parts) != 3 {
		t.Errorf("30 identifiers split over %d masters, want 3", len(parts))
	}
}

// TestRedisUnindexed: a state that is never reset keeps no index entry,
// still has its TTL, and decides exactly as an indexed one.
func TestRedisUnindexed(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := NewRedisStore(rdb, RedisOptions{})
	ctx := context.Background()
	scope := uniqueScope(t)
	for _, l := range []Limit{
		{Algorithm: FixedWindow, Limit: 3, Window: time.Minute},
		{Algorithm: SlidingWindow, Limit: 3, Window: time.Minute},
		{Algorithm: TokenBucket, Limit: 3, Window: time.Minute},
		{Algorithm: GCRA, Limit: 3, Window: time.Minute},
	} {
		indexed := Request{Key: Key{scope, "indexed", ""}, Limit: l, Hits: 1}
		unindexed := Request{Key: Key{scope, "unindexed", ""}, Limit: l, Hits: 1, Unindexed: true}
		for i := range 5 {
			ds, err := s.Check(ctx, []Request{indexed, unindexed})
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
