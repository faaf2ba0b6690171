package algorithms

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentNeverOverAdmits sends 240 goroutines over 4 independent
// Redis clients (stand-ins for 4 Throttle replicas) at one key: fixed window,
// sliding window, token bucket and GCRA must admit exactly the limit. The
// memory store gets the same treatment.
func TestConcurrentNeverOverAdmits(t *testing.T) {
	const (
		replicas   = 4
		goroutines = 240
		perG       = 5
		limit      = 100
	)
	limits := []Limit{
		{Algorithm: FixedWindow, Limit: limit, Window: time.Hour},
		{Algorithm: SlidingWindow, Limit: limit, Window: time.Hour},
		// 0.001 tokens/s: the test's second or two refills nothing whole.
		{Algorithm: TokenBucket, Limit: limit, RefillRate: 0.001},
		// T = 1 h: the test's second or two admits nothing past the burst.
		{Algorithm: GCRA, Limit: limit, Window: limit * time.Hour},
	}
	newStores := map[string]func(t *testing.T) []Store{
		"redis": func(t *testing.T) []Store {
			var ss []Store
			for range replicas {
				ss = append(ss, NewRedisStore(newRedisClient(t, 20), RedisOptions{}))
			}
			return ss
		},
		"redis-coalesced": func(t *testing.T) []Store {
			var ss []Store
			for range replicas {
				s := NewRedisStore(newRedisClient(t, 20), RedisOptions{Coalesce: 4})
				t.Cleanup(s.Close)
				ss = append(ss, s)
			}
			return ss
		},
		"memory": func(t *testing.T) []Store {
			m := NewMemoryStore(MemoryOptions{})
			return []Store{m, m, m, m}
		},
	}
	for storeName, mk := range newStores {
		for _, l := range limits {
			t.Run(storeName+"/"+string(l.Algorithm), func(t *testing.T) {
				for attempt := 0; ; attempt++ {
					admitted, windows := hammer(t, mk(t), l, goroutines, perG)
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
func hammer(t *testing.T, stores []Store, l Limit, goroutines, perG int) (int64, int) {
	t.Helper()
	key := Key{Scope: uniqueScope(t), Identifier: "hot"}
	var admitted atomic.Int64
	var mu sync.Mutex
	windows := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func(s Store) {
			defer wg.Done()
			<-start
			for range perG {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ds, err := s.Check(ctx, []Request{{Key: key, Limit: l, Hits: 1}})
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if ds[0].Allowed {
					admitted.Add(1)
				}
				if l.Algorithm == FixedWindow || l.Algorithm == SlidingWindow {
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

// slidingOverAdmission drives a sliding window limit with arrivals (µs
// offsets from t0, ascending) and returns the largest number of admitted hits
// found in any span of one window, as an exact sliding log counts them.
func slidingOverAdmission(t *testing.T, s Store, clock *fakeClock, l Limit, arrivals []int64) int {
	t.Helper()
	key := Key{Scope: uniqueScope(t), Identifier: "x"}
	var admitted []int64
	base := clock.Now()
	for _, a := range arrivals {
		clock.now = base.Add(time.Duration(a) * time.Microsecond)
		ds, err := s.Check(context.Background(), []Request{{Key: key, Limit: l, Hits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed {
			admitted = append(admitted, a)
		}
	}
	w := l.Window.Microseconds()
	most, lo := 0, 0
	for hi, a := range admitted {
		for admitted[lo] <= a-w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// TestSlidingWindowAccuracy measures the sliding window's over-admission
// against an exact sliding log, on both stores (which must agree exactly).
// The arrivals are deterministic, so the figures are too; docs/algorithms.md
// quotes them.
func TestSlidingWindowAccuracy(t *testing.T) {
	const limit = 100
	l := Limit{Algorithm: SlidingWindow, Limit: limit, Window: time.Minute}
	w := l.Window.Microseconds()

	// Worst case: the previous window's quota all in its last millisecond,
	// then a steady stream through the current window.
	var worst []int64
	for range limit {
		worst = append(worst, w-1000)
	}
	for i := int64(0); i < 10*limit; i++ {
		worst = append(worst, w+i*w/(10*limit))
	}
	// Typical overload: evenly spaced arrivals at 3× the limit for 20 windows,
	// with a little deterministic jitter.
	var steady []int64
	for i := int64(0); i < 20*3*limit; i++ {
		steady = append(steady, i*w/(3*limit)+(i*7919)%(w/(3*limit)))
	}
	// Bursty: a burst of 2× the limit at a random-looking point of each window.
	var bursty []int64
	for win := int64(0); win < 20; win++ {
		at := win*w + (win*48271)%w
		for j := int64(0); j < 2*limit; j++ {
			bursty = append(bursty, at+j*100)
		}
	}

	cases := []struct {
		name     string
		arrivals []int64
		bound    int // the test fails above it
	}{
		{"worst case", worst, 2*limit - 1},
		{"steady 3x overload", steady, limit * 103 / 100},
		{"bursts of 2x", bursty, limit * 150 / 100},
	}
	for _, tc := range cases {
		results := map[string]int{}
		for _, f := range storeFactories() {
			clock := &fakeClock{now: t0}
			t.Run(tc.name+"/"+f.name, func(t *testing.T) {
				got := slidingOverAdmission(t, f.make(t, clock.Now), clock, l, tc.arrivals)
				results[f.name] = got
				t.Logf("%s: at most %d admitted in any %s span (limit %d, %.1f%% over)", tc.name, got, l.Window, limit, float64(got-limit)*100/limit)
				if got > tc.bound {
					t.Errorf("%s: %d admitted in one window span, bound %d", tc.name, got, tc.bound)
				}
			})
		}
		for name, got := range results {
			if got != results["memory"] {
				t.Errorf("%s: memory measured %d, %s %d: the stores disagree", tc.name, results["memory"], name, got)
			}
		}
	}
}
