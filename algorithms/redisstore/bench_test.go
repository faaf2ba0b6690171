package redisstore

import (
	"context"
	"strconv"
	"strings"
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

// roundTrips counts the commands a client sends (each its own round trip;
// a pipeline counts once).
type roundTrips struct{ n int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n++; return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n++; return next(ctx, cmds) }
}

// BenchmarkHolds reserves (a Check with a Hold) and commits (Settle) on
// one connection: the round trips to Redis per call, and the commands
// Redis runs per call (INFO commandstats, the script's commands included).
func BenchmarkHolds(b *testing.B) {
	ctx := context.Background()
	rdb := newRedisClient(b, 1)
	hook := &roundTrips{}
	rdb.AddHook(hook)
	s := New(rdb, Options{HoldSweepEvery: -1})
	b.Cleanup(s.Close)
	stats := newRedisClient(b, 1)
	commands := func() int64 {
		info, err := stats.Info(ctx, "stats").Result()
		if err != nil {
			b.Fatal(err)
		}
		return infoInt(info, "total_commands_processed")
	}
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: algorithms.MaxLimit, Window: time.Hour}
	key := algorithms.Key{Scope: storetest.UniqueScope(b), Identifier: "llm"}
	var ids []string
	b.Run("reserve", func(b *testing.B) {
		before, trips := commands(), hook.n
		for b.Loop() {
			id := "r" + strconv.Itoa(len(ids))
			ids = append(ids, id)
			if _, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: l, Hits: 10, Hold: &algorithms.Hold{ID: id, TTL: time.Minute}}}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(hook.n-trips)/float64(b.N), "round-trips/op")
		b.ReportMetric(float64(commands()-before-1)/float64(b.N), "redis-commands/op")
	})
	b.Run("commit", func(b *testing.B) {
		var trips, cmds int64
		i := 0
		for b.Loop() {
			b.StopTimer()
			id := "c" + strconv.Itoa(i)
			i++
			if _, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: l, Hits: 10, Hold: &algorithms.Hold{ID: id, TTL: time.Minute}}}); err != nil {
				b.Fatal(err)
			}
			c0, t0 := commands(), hook.n
			b.StartTimer()
			rs, err := s.Settle(ctx, []algorithms.Settle{{Request: algorithms.Request{Key: key, Limit: l, Hits: 7}, ID: id}})
			b.StopTimer()
			if err != nil || rs[0].Outcome != algorithms.Settled {
				b.Fatal(rs, err)
			}
			trips += hook.n - t0
			cmds += commands() - c0 - 1 // (the first INFO counts itself)
			b.StartTimer()
		}
		b.ReportMetric(float64(trips)/float64(b.N), "round-trips/op")
		b.ReportMetric(float64(cmds)/float64(b.N), "redis-commands/op")
	})
}

// infoInt reads field of an INFO reply.
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
