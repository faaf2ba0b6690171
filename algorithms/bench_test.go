package algorithms_test

import (
	"testing"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// BenchmarkCheck runs the engine's benchmark on the memory store.
func BenchmarkCheck(b *testing.B) {
	mem := algorithms.NewMemoryStore(algorithms.MemoryOptions{})
	storetest.Check(b, []storetest.BenchStore{{Name: "memory", Single: mem, Parallel: mem}})
}
