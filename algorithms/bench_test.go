package algorithms

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Benchmarks: each algorithm on each store, one connection (sequential) and
// parallel, plus a batch of 4 requests (one Envoy call with 4 descriptors).
// Run with `make bench`; docs/benchmarks.md records the figures.

var benchLimits = []Limit{
	{Algorithm: FixedWindow, Limit: 1_000_000_000, Window: time.Hour},
	{Algorithm: SlidingWindow, Limit: 1_000_000_000, Window: time.Hour},
	{Algorithm: TokenBucket, Limit: 1_000_000_000, Window: time.Hour},
	{Algorithm: GCRA, Limit: 1_000_000_000, Window: time.Hour},
}

func benchStores(b *testing.B) []struct {
	name     string
	single   Store
	parallel Store
} {
	mem := NewMemoryStore(MemoryOptions{})
	coalesced := NewRedisStore(newRedisClient(b, 64), RedisOptions{Coalesce: 8})
	b.Cleanup(coalesced.Close)
	return []struct {
		name     string
		single   Store
		parallel Store
	}{
		{"memory", mem, mem},
		{"redis", NewRedisStore(newRedisClient(b, 1), RedisOptions{}), NewRedisStore(newRedisClient(b, 64), RedisOptions{})},
		{"redis-coalesced", NewRedisStore(newRedisClient(b, 1), RedisOptions{}), coalesced},
	}
}

func BenchmarkCheck(b *testing.B) {
	ctx := context.Background()
	for _, st := range benchStores(b) {
		for _, l := range benchLimits {
			scope := uniqueScope(b)
			b.Run(st.name+"/"+string(l.Algorithm)+"/single", func(b *testing.B) {
				reqs := []Request{{Key: Key{scope, "user_1", ""}, Limit: l, Hits: 1}}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := st.single.Check(ctx, reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(st.name+"/"+string(l.Algorithm)+"/parallel", func(b *testing.B) {
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					// Each goroutine its own identifier, like real traffic.
					reqs := []Request{{Key: Key{scope, "user_" + strconv.FormatInt(n.Add(1), 10), ""}, Limit: l, Hits: 1}}
					for pb.Next() {
						if _, err := st.parallel.Check(ctx, reqs); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
		b.Run(st.name+"/batch4/single", func(b *testing.B) {
			scope := uniqueScope(b)
			reqs := []Request{
				{Key: Key{scope, "10.0.0.1", "remote_address"}, Limit: benchLimits[0], Hits: 1},
				{Key: Key{scope, "user_1", "user_id"}, Limit: benchLimits[0], Hits: 1},
				{Key: Key{scope, "api", "generic_key"}, Limit: benchLimits[1], Hits: 1},
				{Key: Key{scope, "GET", "method"}, Limit: benchLimits[2], Hits: 1},
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := st.single.Check(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/decision")
		})
	}
}

// BenchmarkRedisFloor measures, on the same connection setup, what any
// decision costs at least: one round trip (PING), and the product
// description's own approach to a fixed window — a pipelined INCR + EXPIRE,
// which is not atomic with its limit check and counts rejected requests.
// It puts the single-connection figures of BenchmarkCheck in context.
func BenchmarkRedisFloor(b *testing.B) {
	ctx := context.Background()
	rdb := newRedisClient(b, 1)
	b.Run("ping/single", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	key := uniqueScope(b) + ":incr"
	b.Run("incr_expire_pipelined/single", func(b *testing.B) {
		for b.Loop() {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, key)
				p.Expire(ctx, key, time.Minute)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
