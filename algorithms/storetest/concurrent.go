package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Replicas makes n stores that share one backend, as n Throttle replicas
// do (a memory store may return one store n times).
type Replicas func(t *testing.T, n int) []algorithms.Store

// Concurrent sends 240 goroutines spread over 4 replicas of each store at
// one key: fixed window, sliding window, token bucket and GCRA must admit
// exactly the limit.
func Concurrent(t *testing.T, newStores map[string]Replicas) {
	const (
		replicas   = 4
		goroutines = 240
		perG       = 5
		limit      = 100
	)
	limits := []algorithms.Limit{
		{Algorithm: algorithms.FixedWindow, Limit: limit, Window: time.Hour},
		{Algorithm: algorithms.SlidingWindow, Limit: limit, Window: time.Hour},
		// 0.001 tokens/s: the test's second or two refills nothing whole.
		{Algorithm: algorithms.TokenBucket, Limit: limit, RefillRate: 0.001},
		// T = 1 h: the test's second or two admits nothing past the burst.
		{Algorithm: algorithms.GCRA, Limit: limit, Window: limit * time.Hour},
	}
	for storeName, mk := range newStores {
		for _, l := range limits {
			t.Run(storeName+"/"+string(l.Algorithm), func(t *testing.T) {
				for attempt := 0; ; attempt++ {
					admitted, windows := hammer(t, mk(t, replicas), l, goroutines, perG)
					if windows > 1 && attempt < 2 {
						// An hour boundary fell inside the run: the second
						// window legitimately admits more. Run again.
						continue
					}
					if admitted != limit {
						t.Fatalf("admitted %d of %d requests, want exactly %d", admitted, goroutines*perG, limit)
					}
					return
				}
			})
		}
	}
}

// hammer runs goroutines×perG single-hit requests on one key spread over the
// stores and returns how many were admitted and how many distinct windows the
// decisions fell in.
func hammer(t *testing.T, stores []algorithms.Store, l algorithms.Limit, goroutines, perG int) (int64, int) {
	t.Helper()
	key := algorithms.Key{Scope: UniqueScope(t), Identifier: "hot"}
	var admitted atomic.Int64
	var mu sync.Mutex
	windows := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func(s algorithms.Store) {
			defer wg.Done()
			<-start
			for range perG {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ds, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: l, Hits: 1}})
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if ds[0].Allowed {
					admitted.Add(1)
				}
				if l.Algorithm == algorithms.FixedWindow || l.Algorithm == algorithms.SlidingWindow {
					w := ds[0].ResetAt().Add(-l.Window).Unix()
					mu.Lock()
					windows[w] = true
					mu.Unlock()
				}
			}
		}(stores[g%len(stores)])
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("check: %v", err)
	}
	return admitted.Load(), len(windows)
}
