package storetest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Benchmarks over any store: `make bench` runs them on the memory store
// (package algorithms) and the Redis store (package redisstore);
// docs/benchmarks.md records the figures.

// BenchStore is a store under benchmark.
type BenchStore struct {
	Name string
	// Single serves one caller at a time; Parallel many (for Redis: a
	// client with a pool of connections).
	Single, Parallel algorithms.Store
}

// BenchLimits are the benchmarks' limits: one per algorithm, never reached.
var BenchLimits = []algorithms.Limit{
	{Algorithm: algorithms.FixedWindow, Limit: 1_000_000_000, Window: time.Hour},
	{Algorithm: algorithms.SlidingWindow, Limit: 1_000_000_000, Window: time.Hour},
	{Algorithm: algorithms.TokenBucket, Limit: 1_000_000_000, Window: time.Hour},
	{Algorithm: algorithms.GCRA, Limit: 1_000_000_000, Window: time.Hour},
}

// Check benchmarks each algorithm on each store: one caller at a time
// (single), 16 goroutines per core at once (parallel), and a batch of 4
// requests (one Envoy call with 4 descriptors).
func Check(b *testing.B, stores []BenchStore) { CheckLimits(b, stores, BenchLimits) }

// CheckLimits is Check with limits of one's own.
func CheckLimits(b *testing.B, stores []BenchStore, limits []algorithms.Limit) {
	ctx := context.Background()
	for _, st := range stores {
		for _, l := range limits {
			scope := UniqueScope(b)
			b.Run(st.Name+"/"+string(l.Algorithm)+"/single", func(b *testing.B) {
				reqs := []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: "user_1"}, Limit: l, Hits: 1}}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := st.Single.Check(ctx, reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(st.Name+"/"+string(l.Algorithm)+"/parallel", func(b *testing.B) {
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					// Each goroutine its own identifier, like real traffic.
					reqs := []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: "user_" + strconv.FormatInt(n.Add(1), 10)}, Limit: l, Hits: 1}}
					for pb.Next() {
						if _, err := st.Parallel.Check(ctx, reqs); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
		b.Run(st.Name+"/batch4/single", func(b *testing.B) {
			scope := UniqueScope(b)
			reqs := []algorithms.Request{
				{Key: algorithms.Key{Scope: scope, Identifier: "10.0.0.1", Name: "remote_address"}, Limit: limits[0], Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "user_1", Name: "user_id"}, Limit: limits[0], Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "api", Name: "generic_key"}, Limit: limits[1%len(limits)], Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "GET", Name: "method"}, Limit: limits[2%len(limits)], Hits: 1},
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := st.Single.Check(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/decision")
		})
	}
}
