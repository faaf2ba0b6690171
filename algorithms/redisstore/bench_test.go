package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// BenchmarkCheck runs the engine's benchmark on the Redis store, plain and
// coalesced (the Envoy service's setting).
func BenchmarkCheck(b *testing.B) {
	coalesced := New(newRedisClient(b, 64), Options{Coalesce: 8})
	b.Cleanup(coalesced.Close)
	storetest.Check(b, []storetest.BenchStore{
		{Name: "redis", Single: New(newRedisClient(b, 1), Options{}), Parallel: New(newRedisClient(b, 64), Options{})},
		{Name: "redis-coalesced", Single: New(newRedisClient(b, 1), Options{}), Parallel: coalesced},
	})
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
	key := storetest.UniqueScope(b) + ":incr"
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

// BenchmarkApproximate decides approximate limits (from memory, synced in
// the background) on the Redis store, beside BenchmarkCheck's memory store.
func BenchmarkApproximate(b *testing.B) {
	s := New(newRedisClient(b, 8), Options{})
	b.Cleanup(s.Close)
	var approx []algorithms.Limit
	for _, l := range storetest.BenchLimits {
		if l.Algorithm == algorithms.FixedWindow || l.Algorithm == algorithms.SlidingWindow {
			l.Accuracy = algorithms.Approximate
			approx = append(approx, l)
		}
	}
	storetest.CheckLimits(b, []storetest.BenchStore{{Name: "redis-approximate", Single: s, Parallel: s}}, approx)
}
