package algorithms_test

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// TestMemoryStore runs the conformance suite on the memory store, and on one
// of a single shard: every identifier shares the map, so Reset, Sweep and
// lookups must tell them apart by their keys alone.
func TestMemoryStore(t *testing.T) {
	storetest.Run(t, []storetest.Factory{
		storetest.Memory(),
		{Name: "memory-1-shard", New: func(t *testing.T, now func() time.Time) algorithms.Store {
			return algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: now, Shards: 1})
		}},
	})
}

// TestMemoryConcurrent: 240 goroutines at one key of one memory store admit
// exactly the limit.
func TestMemoryConcurrent(t *testing.T) {
	storetest.Concurrent(t, map[string]storetest.Replicas{
		"memory": func(t *testing.T, n int) []algorithms.Store {
			m := algorithms.NewMemoryStore(algorithms.MemoryOptions{})
			ss := make([]algorithms.Store, n)
			for i := range ss {
				ss[i] = m
			}
			return ss
		},
	})
}
