package overlimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/algorithms/storetest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// TestCacheChangesNoDecision replays one random sequence of
// requests (several keys, hits 1-3, time moving in uneven steps across
// window and refill boundaries) through the cache in front of a store and
// through an identical store alone, in lockstep: every decision's Allowed
// must agree, and the cache must have answered many of them.
func TestCacheChangesNoDecision(t *testing.T) {
	limits := []algorithms.Limit{
		{Algorithm: algorithms.FixedWindow, Limit: 5, Window: 10 * time.Second},
		{Algorithm: algorithms.SlidingWindow, Limit: 5, Window: 10 * time.Second},
		{Algorithm: algorithms.TokenBucket, Limit: 5, Window: 10 * time.Second},
		{Algorithm: algorithms.TokenBucket, Limit: 3, RefillRate: 0.7},
		{Algorithm: algorithms.GCRA, Limit: 5, Window: 10 * time.Second},
		{Algorithm: algorithms.GCRA, Limit: 3, Window: 7 * time.Second}, // T = 2333333 1/3 µs
	}
	backends := map[string]func(t *testing.T, clock *storetest.Clock) (algorithms.Store, algorithms.Store){
		"memory": func(t *testing.T, clock *storetest.Clock) (algorithms.Store, algorithms.Store) {
			return algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: clock.Now}), algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: clock.Now})
		},
		"redis": func(t *testing.T, clock *storetest.Clock) (algorithms.Store, algorithms.Store) {
			rdb := redistest.NewClient(t, redistest.SharedURL(t))
			return redisstore.New(rdb, redisstore.Options{Now: clock.Now}), redisstore.New(rdb, redisstore.Options{Now: clock.Now})
		},
	}
	for name, mk := range backends {
		for _, l := range limits {
			t.Run(fmt.Sprintf("%s/%s/%v", name, l.Algorithm, l.RefillRate), func(t *testing.T) {
				clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
				behind, alone := mk(t, clock)
				cache, err := New(behind, Options{MaxBytes: 1 << 20, Now: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				scopeA, scopeB := storetest.UniqueScope(t), storetest.UniqueScope(t)
				rng := rand.New(rand.NewPCG(1, 2))
				ctx := context.Background()
				cached := 0
				for step := range 3000 {
					id := fmt.Sprintf("k%d", rng.IntN(3))
					hits := int64(1 + rng.IntN(3))
					if rng.IntN(10) == 0 {
						hits = 0
					}
					mk := func(scope string) []algorithms.Request {
						return []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: id}, Limit: l, Hits: hits}}
					}
					got, err := cache.Check(ctx, mk(scopeA))
					if err != nil {
						t.Fatal(err)
					}
					want, err := alone.Check(ctx, mk(scopeB))
					if err != nil {
						t.Fatal(err)
					}
					if got[0].Allowed != want[0].Allowed {
						t.Fatalf("step %d (%s, hits %d, t=%v): cached path allowed=%v (cached=%v), store alone allowed=%v",
							step, id, hits, clock.Now().Sub(time.Unix(1_800_000_000, 0)), got[0].Allowed, got[0].Cached, want[0].Allowed)
					}
					if got[0].Cached {
						cached++
						if got[0].RetryAfter <= 0 || got[0].RetryAfter > want[0].RetryAfter+time.Millisecond {
							t.Fatalf("step %d: cached RetryAfter %v, the store says %v", step, got[0].RetryAfter, want[0].RetryAfter)
						}
					}
					clock.Advance(time.Duration(rng.IntN(900)) * time.Millisecond)
				}
				if cached < 300 {
					t.Errorf("the cache answered %d of 3000 requests; the test does not exercise it", cached)
				}
			})
		}
	}
}

// TestCacheBounded: many distinct rejected keys never take more
// than the configured bytes, and Reset forgets an identifier.
func TestCacheBounded(t *testing.T) {
	clock := storetest.NewClock(time.Unix(1_800_000_000, 0))
	const maxBytes = 64 * 1024
	cache, err := New(algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: clock.Now}), Options{MaxBytes: maxBytes, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}
	ctx := context.Background()
	for i := range 5000 {
		r := []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: fmt.Sprintf("user-%06d", i)}, Limit: l, Hits: 1}}
		for range 2 { // the second is rejected and cached
			if _, err := cache.Check(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if b := cache.bytes(); b > maxBytes {
			t.Fatalf("after %d keys the cache holds %d bytes, over %d", i+1, b, maxBytes)
		}
	}
	if cache.bytes() < maxBytes/2 {
		t.Errorf("cache holds %d bytes after 5000 rejected keys, want it near %d", cache.bytes(), maxBytes)
	}

	r := []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: "reset-me"}, Limit: l, Hits: 1}}
	for i, want := range []bool{true, false, false} {
		ds, _ := cache.Check(ctx, r)
		if ds[0].Allowed != want || (i == 2 && !ds[0].Cached) {
			t.Fatalf("check %d: %+v, want allowed=%v (the third from the cache)", i, ds[0], want)
		}
	}
	if _, err := cache.Reset(ctx, "s", "reset-me", ""); err != nil {
		t.Fatal(err)
	}
	if ds, _ := cache.Check(ctx, r); !ds[0].Allowed || ds[0].Cached {
		t.Fatalf("after Reset: %+v, want allowed by the store", ds[0])
	}
}

// TestCacheSkipsDegraded: rejections by the failure policy (Redis
// down, FAILURE_MODE closed) are not cached: once Redis is back, the store
// decides again.
func TestCacheSkipsDegraded(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	dead := redisstore.New(rdb, redisstore.Options{})
	g, err := redisstore.NewGuard(dead, redisstore.GuardOptions{Mode: algorithms.FailClosed, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := New(g, Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r := []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: "u"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Hour}, Hits: 1}}
	for i := range 3 {
		ds, err := cache.Check(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed || !ds[0].Degraded || ds[0].Cached {
			t.Fatalf("check %d with Redis down: %+v, want a degraded rejection not from the cache", i, ds[0])
		}
	}
}
