package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// BenchmarkRedisCPU measures what decisions cost Redis itself: the CPU the
// server spends (INFO used_cpu_user + used_cpu_sys) per decision, for each
// algorithm, fresh keys (the Envoy path's unindexed counters), batches of
// 1, 4, 16 and 64 requests per call (a coalesced call carries many). The
// floor is a pipeline of INCRBY + EXPIRE per decision, batched alike: the
// cheapest fixed window there is (not atomic with its check, counting
// rejected requests). Redis does not scale with Throttle's replicas: this
// figure sets how many decisions one Redis core, one Cluster master, carries.
func BenchmarkRedisCPU(b *testing.B) {
	ctx := context.Background()
	rdb := newRedisClient(b, 1)
	s := New(rdb, Options{})
	for _, batch := range []int{1, 4, 16, 64} {
		for _, l := range storetest.BenchLimits {
			b.Run(fmt.Sprintf("%s/batch=%d", l.Algorithm, batch), func(b *testing.B) {
				scope := uniqueScope(b)
				reqs := make([]algorithms.Request, batch)
				n := 0
				measureRedisCPU(b, rdb, batch, func() {
					for i := range reqs {
						n++
						reqs[i] = algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "user_" + strconv.Itoa(n)}, Limit: l, Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund}
					}
					if _, err := s.Check(ctx, reqs); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
		b.Run(fmt.Sprintf("floor/batch=%d", batch), func(b *testing.B) {
			prefix := uniqueScope(b) + ":floor:"
			n := 0
			measureRedisCPU(b, rdb, batch, func() {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range batch {
						n++
						key := prefix + strconv.Itoa(n)
						p.IncrBy(ctx, key, 1)
						p.Expire(ctx, key, time.Hour)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// measureRedisCPU runs call (batch decisions each) until b.N decisions are
// made and reports Redis's CPU per decision.
func measureRedisCPU(b *testing.B, rdb *redis.Client, batch int, call func()) {
	b.Helper()
	call() // the script is loaded, the connection up
	before := redisCPU(b, rdb)
	calls := max(1, b.N/batch)
	b.ResetTimer()
	for range calls {
		call()
	}
	b.StopTimer()
	used := redisCPU(b, rdb) - before
	b.ReportMetric(float64(used.Nanoseconds())/1e3/float64(calls*batch), "redis-µs/decision")
	b.ReportMetric(0, "ns/op")
}

// redisCPU is the server's used_cpu_user + used_cpu_sys.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += v
		}
	}
	return time.Duration(math.Round(sum * 1e9))
}
