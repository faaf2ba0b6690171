package redisstore

import (
	"testing"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// TestConformance runs the engine's conformance suite on every
// configuration of the Redis store, beside the memory store (the accuracy
// figures of both must agree).
func TestConformance(t *testing.T) {
	storetest.Run(t, append([]storetest.Factory{storetest.Memory()}, storeFactories()...))
}

// TestConcurrentNeverOverAdmits sends 240 goroutines over 4 independent
// Redis clients (stand-ins for 4 Throttle replicas) at one key: fixed window,
// sliding window, token bucket and GCRA must admit exactly the limit.
func TestConcurrentNeverOverAdmits(t *testing.T) {
	replicas := func(opts Options, wrap func(algorithms.Store) algorithms.Store) storetest.Replicas {
		return func(t *testing.T, n int) []algorithms.Store {
			var ss []algorithms.Store
			for range n {
				s := New(newRedisClient(t, 20), opts)
				t.Cleanup(s.Close)
				ss = append(ss, wrap(s))
			}
			return ss
		}
	}
	same := func(s algorithms.Store) algorithms.Store { return s }
	storetest.Concurrent(t, map[string]storetest.Replicas{
		"redis":           replicas(Options{}, same),
		"redis-coalesced": replicas(Options{Coalesce: 4}, same),
		// The Envoy service's counters: fixed and sliding windows counted
		// first (plain.go), on Redis's clock.
		"redis-unindexed-coalesced": replicas(Options{Coalesce: 2}, storetest.Unindexed),
	})
}
