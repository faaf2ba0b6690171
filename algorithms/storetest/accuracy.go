package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// The accuracy of the sliding window and GCRA against an exact sliding log:
// the same deterministic replays through both stores, which must agree
// exactly. docs/algorithms.md quotes the figures this test pins.

// accuracyReplay is traffic for Accuracy: single-hit arrivals, µs offsets
// from T0, ascending.
type accuracyReplay struct {
	name     string
	arrivals []int64
}

// accuracyReplays returns the three replays for a limit per window w (µs).
func accuracyReplays(limit, w int64) []accuracyReplay {
	// Worst case for the sliding window: the previous window's quota all in
	// its last millisecond, then a steady stream through the current window.
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
	return []accuracyReplay{
		{"worst case", worst},
		{"steady 3x overload", steady},
		{"bursts of 2x", bursty},
	}
}

// replay drives l with arrivals and returns the admitted ones.
func replay(t *testing.T, s algorithms.Store, clock *Clock, l algorithms.Limit, arrivals []int64) []int64 {
	t.Helper()
	key := algorithms.Key{Scope: UniqueScope(t), Identifier: "x"}
	var admitted []int64
	for _, a := range arrivals {
		clock.mu.Lock()
		clock.now = T0.Add(time.Duration(a) * time.Microsecond)
		clock.mu.Unlock()
		ds, err := s.Check(context.Background(), []algorithms.Request{{Key: key, Limit: l, Hits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed {
			admitted = append(admitted, a)
		}
	}
	return admitted
}

// slidingLog is the exact sliding log: an arrival is admitted when fewer
// than limit arrivals were admitted in the window (a − w, a] before it.
func slidingLog(limit, w int64, arrivals []int64) []int64 {
	var admitted []int64
	lo := 0
	for _, a := range arrivals {
		for lo < len(admitted) && admitted[lo] <= a-w {
			lo++
		}
		if int64(len(admitted)-lo) < limit {
			admitted = append(admitted, a)
		}
	}
	return admitted
}

// mostInWindow returns the largest number of admitted arrivals in any span
// (a − w, a] of one window, as an exact sliding log counts them.
func mostInWindow(admitted []int64, w int64) int {
	most, lo := 0, 0
	for hi, a := range admitted {
		for admitted[lo] <= a-w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// Accuracy measures, for limit 100 per minute, the most hits the sliding
// window and GCRA admit in any span of one window (also once two windows
// have passed), and how many they admit in all against an exact sliding log
// on the same traffic. The figures are
// pinned: a change to an algorithm must update docs/algorithms.md too. Each
// replay also checks the bound the algorithm documents: the sliding window
// at most 2×limit−1 in a window span; GCRA at most limit + ⌊s×limit/window⌋
// in every span of length s between two admitted hits (so 2×limit−1 within
// one window).
func Accuracy(t *testing.T, factories []Factory) {
	const limit = 100
	w := time.Minute.Microseconds()
	// most: in any window span; admitted: in all; warmMost, warmAdmitted:
	// the same from the third window on, once a cold start has passed.
	type figures struct{ most, admitted, warmMost, warmAdmitted int }
	cases := []struct {
		alg  algorithms.Algorithm
		want map[string]figures // by replay
	}{
		{algorithms.SlidingWindow, map[string]figures{
			"worst case":         {199, 199, 0, 0},
			"steady 3x overload": {101, 1981, 100, 1782},
			"bursts of 2x":       {100, 1004, 100, 904},
		}},
		{algorithms.GCRA, map[string]figures{
			"worst case":         {199, 199, 0, 0},
			"steady 3x overload": {199, 2099, 101, 1800},
			"bursts of 2x":       {100, 2000, 100, 1800},
		}},
	}
	// The sliding log admits at most limit in any window span by definition;
	// these are its admitted totals, in all and from the third window on.
	wantLog := map[string][2]int{"worst case": {100, 0}, "steady 3x overload": {2000, 1800}, "bursts of 2x": {2000, 1800}}
	for _, rp := range accuracyReplays(limit, w) {
		logAdmitted := slidingLog(limit, w, rp.arrivals)
		if got := mostInWindow(logAdmitted, w); got != limit {
			t.Fatalf("%s: the sliding log admitted %d in one window", rp.name, got)
		}
		if got := [2]int{len(logAdmitted), len(from(logAdmitted, 2*w))}; got != wantLog[rp.name] {
			t.Errorf("%s: the sliding log admitted %v (in all, from the third window on), pinned %v", rp.name, got, wantLog[rp.name])
		}
		for _, tc := range cases {
			l := algorithms.Limit{Algorithm: tc.alg, Limit: limit, Window: time.Minute}
			results := map[string]figures{}
			for _, f := range factories {
				t.Run(string(tc.alg)+"/"+rp.name+"/"+f.Name, func(t *testing.T) {
					clock := NewClock(T0)
					admitted := replay(t, f.New(t, clock.Now), clock, l, rp.arrivals)
					warm := from(admitted, 2*w)
					got := figures{mostInWindow(admitted, w), len(admitted), mostInWindow(warm, w), len(warm)}
					results[f.Name] = got
					t.Logf("%s, %s: at most %d admitted in any %s span (limit %d, %.1f%% over); %d admitted in all, the sliding log %d (%+.1f%%)",
						tc.alg, rp.name, got.most, l.Window, limit, float64(got.most-limit)*100/limit,
						got.admitted, len(logAdmitted), float64(got.admitted-len(logAdmitted))*100/float64(len(logAdmitted)))
					if got.most > 2*limit-1 {
						t.Errorf("%d admitted in one window span, bound %d", got.most, 2*limit-1)
					}
					if tc.alg == algorithms.GCRA {
						checkSpanBound(t, admitted, limit, w)
					}
					if got != tc.want[rp.name] {
						t.Errorf("figures %+v, pinned %+v: update the test and docs/algorithms.md", got, tc.want[rp.name])
					}
				})
			}
			for name, got := range results {
				if got != results["memory"] {
					t.Errorf("%s, %s: memory measured %+v, %s %+v: the stores disagree", tc.alg, rp.name, results["memory"], name, got)
				}
			}
		}
	}
}

// from returns the arrivals at or after µs offset at.
func from(arrivals []int64, at int64) []int64 {
	for i, a := range arrivals {
		if a >= at {
			return arrivals[i:]
		}
	}
	return nil
}

// checkSpanBound checks GCRA's documented bound on every span between two
// admitted single hits: j−i+1 hits in [a_i, a_j] ≤ limit + ⌊(a_j−a_i)×limit/w⌋.
func checkSpanBound(t *testing.T, admitted []int64, limit, w int64) {
	t.Helper()
	for j := range admitted {
		for i := 0; i <= j; i++ {
			n := int64(j - i + 1)
			if bound := limit + (admitted[j]-admitted[i])*limit/w; n > bound {
				t.Fatalf("%d hits admitted in [%d µs, %d µs], bound %d", n, admitted[i], admitted[j], bound)
			}
		}
	}
}
