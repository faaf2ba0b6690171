package main

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callFunc makes call i with ctx (which carries the call's deadline) and
// says whether it was over the limit; on failure it returns the error's
// code, such as a gRPC code name, and the error.
type callFunc func(ctx context.Context, i int) (over bool, code string, err error)

// tally is what a bounded burst of calls got back.
type tally struct {
	calls     int
	ok, over  int
	errors    map[string]int    // by code
	firstErr  map[string]string // the first error of each code
	latencies []time.Duration   // sorted
	elapsed   time.Duration
}

// drive makes calls from o.concurrency goroutines until n calls were made
// (n > 0), dur has passed (dur > 0) or ctx ends, whichever comes first. A
// call in flight at the time bound ends by its own deadline, o.timeout.
func drive(ctx context.Context, o *options, n int, dur time.Duration, call callFunc) *tally {
	var next atomic.Int64
	var mu sync.Mutex
	t := &tally{errors: map[string]int{}, firstErr: map[string]string{}}
	var wg sync.WaitGroup
	start := time.Now()
	var stopAt time.Time
	if dur > 0 {
		stopAt = start.Add(dur)
	}
	for range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var ok, over int
			errs := map[string]int{}
			first := map[string]string{}
			for ctx.Err() == nil && (stopAt.IsZero() || time.Now().Before(stopAt)) {
				i := int(next.Add(1)) - 1
				if n > 0 && i >= n {
					break
				}
				callCtx, cancel := context.WithTimeout(ctx, o.timeout)
				t0 := time.Now()
				isOver, code, err := call(callCtx, i)
				lat = append(lat, time.Since(t0))
				cancel()
				switch {
				case err != nil:
					errs[code]++
					if _, seen := first[code]; !seen {
						first[code] = err.Error()
					}
				case isOver:
					over++
				default:
					ok++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			t.latencies = append(t.latencies, lat...)
			t.ok += ok
			t.over += over
			for c, k := range errs {
				t.errors[c] += k
				if _, seen := t.firstErr[c]; !seen {
					t.firstErr[c] = first[c]
				}
			}
		}()
	}
	wg.Wait()
	t.elapsed = time.Since(start)
	t.calls = len(t.latencies)
	slices.Sort(t.latencies)
	return t
}

// errorCount is the number of failed calls.
func (t *tally) errorCount() int {
	var n int
	for _, k := range t.errors {
		n += k
	}
	return n
}

// quantile returns the q-quantile of the latencies by nearest rank (the
// smallest sample with at least q of all samples at or below it).
func (t *tally) quantile(q float64) time.Duration {
	if len(t.latencies) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(t.latencies)))) - 1
	return t.latencies[max(0, min(len(t.latencies)-1, rank))]
}
