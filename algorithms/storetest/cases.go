package storetest

import (
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// The decisions of every algorithm, step by step: the table Decisions runs.

type step struct {
	advance time.Duration
	hits    int64
	want    want
}

type want struct {
	allowed   bool
	remaining int64
	reset     time.Duration
	retry     time.Duration
}

func ok(remaining int64, reset time.Duration) want {
	return want{allowed: true, remaining: remaining, reset: reset}
}

func deny(remaining int64, reset, retry time.Duration) want {
	return want{remaining: remaining, reset: reset, retry: retry}
}

func repeat(n int, f func(i int) step) []step {
	s := make([]step, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

func join(parts ...[]step) []step {
	var s []step
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

var conformanceCases = []struct {
	name  string
	limit algorithms.Limit
	steps []step
}{
	{
		name:  "fixed window allows the limit, then denies until the next window",
		limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute},
		steps: []step{
			{0, 1, ok(2, time.Minute)},
			{time.Second, 1, ok(1, 59*time.Second)},
			{0, 1, ok(0, 59*time.Second)},
			{0, 1, deny(0, 59*time.Second, 59*time.Second)},
			{58500 * time.Millisecond, 1, deny(0, 500*time.Millisecond, 500*time.Millisecond)},
			{500 * time.Millisecond, 1, ok(2, time.Minute)},
		},
	},
	{
		name:  "fixed window hits above one, rejected requests consume nothing",
		limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute},
		steps: []step{
			{0, 3, ok(2, time.Minute)},
			{0, 3, deny(2, time.Minute, time.Minute)},
			{0, 2, ok(0, time.Minute)},
			{0, 0, ok(0, time.Minute)}, // peek
			{0, 1, deny(0, time.Minute, time.Minute)},
		},
	},
	{
		name:  "fixed window request larger than the limit is never admitted",
		limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute},
		steps: []step{
			{0, 6, deny(5, time.Minute, time.Minute)},
			{0, 5, ok(0, time.Minute)},
		},
	},
	{
		name:  "fixed window peek changes nothing",
		limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Second},
		steps: []step{
			{0, 0, ok(2, time.Second)},
			{0, 0, ok(2, time.Second)},
			{0, 1, ok(1, time.Second)},
			{0, 0, ok(1, time.Second)},
		},
	},
	{
		name:  "fixed window skips empty windows",
		limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Second},
		steps: []step{
			{0, 2, ok(0, time.Second)},
			{3*time.Second + 250*time.Millisecond, 1, ok(1, 750*time.Millisecond)},
		},
	},
	{
		name:  "sliding window counts the weighted previous window",
		limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 10, Window: time.Minute},
		steps: join(
			repeat(10, func(i int) step { return step{0, 1, ok(int64(9-i), time.Minute)} }),
			// Full: admitted again 6 s into the next window, when 10×0.9+1 ≤ 10.
			[]step{{0, 1, deny(0, time.Minute, 66*time.Second)}},
			// 30 s into the next window the previous 10 weigh 5.
			[]step{{90 * time.Second, 1, ok(4, 30*time.Second)}},
			repeat(4, func(i int) step { return step{0, 1, ok(int64(3-i), 30*time.Second)} }),
			// used = 5 + 5 = 10: admitted at 36 s, when the previous weighs 4.
			[]step{{0, 1, deny(0, 30*time.Second, 6*time.Second)}},
			[]step{{6 * time.Second, 1, ok(0, 24*time.Second)}},
		),
	},
	{
		name:  "sliding window forgets after two idle windows",
		limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 4, Window: time.Second},
		steps: []step{
			{0, 4, ok(0, time.Second)},
			{time.Second, 0, ok(0, time.Second)}, // previous weighs 4 at the start
			{500 * time.Millisecond, 0, ok(2, 500*time.Millisecond)},
			{2 * time.Second, 1, ok(3, 500*time.Millisecond)},
		},
	},
	{
		name:  "sliding window hits above one and larger than the limit",
		limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 5, Window: time.Minute},
		steps: []step{
			{0, 6, deny(5, time.Minute, time.Minute)},
			{0, 3, ok(2, time.Minute)},
			{0, 3, deny(2, time.Minute, 80*time.Second)}, // at 80 s: 3×(2/3)+3 ≤ 5
			{0, 2, ok(0, time.Minute)},
		},
	},
	{
		name:  "token bucket drains then refills at limit/window",
		limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 10, Window: 10 * time.Second},
		steps: join(
			repeat(10, func(i int) step { return step{0, 1, ok(int64(9-i), time.Duration(i+1)*time.Second)} }),
			[]step{
				{0, 1, deny(0, 10*time.Second, time.Second)},
				{500 * time.Millisecond, 1, deny(0, 9500*time.Millisecond, 500*time.Millisecond)},
				{500 * time.Millisecond, 1, ok(0, 10*time.Second)},
				{5 * time.Second, 3, ok(2, 8*time.Second)},
				{0, 0, ok(2, 8*time.Second)}, // peek
				{0, 3, deny(2, 8*time.Second, time.Second)},
				{time.Hour, 0, ok(10, 0)}, // full again
			},
		),
	},
	{
		name:  "token bucket explicit refill rate and oversized request",
		limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 4, RefillRate: 2},
		steps: []step{
			{0, 4, ok(0, 2*time.Second)},
			{250 * time.Millisecond, 1, deny(0, 1750*time.Millisecond, 250*time.Millisecond)},
			{250 * time.Millisecond, 1, ok(0, 2*time.Second)},
			{0, 5, deny(0, 2*time.Second, 2*time.Second)},
		},
	},
	{
		name:  "gcra drains then admits one hit per emission interval",
		limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 10, Window: 10 * time.Second}, // T = 1 s
		steps: join(
			repeat(10, func(i int) step { return step{0, 1, ok(int64(9-i), time.Duration(i+1)*time.Second)} }),
			[]step{
				{0, 1, deny(0, 10*time.Second, time.Second)},
				{500 * time.Millisecond, 1, deny(0, 9500*time.Millisecond, 500*time.Millisecond)},
				{500 * time.Millisecond, 1, ok(0, 10*time.Second)},
				{5 * time.Second, 3, ok(2, 8*time.Second)},
				{0, 0, ok(2, 8*time.Second)}, // peek
				// 3 more fit once TAT − now ≤ 10 s − 3 T.
				{0, 3, deny(2, 8*time.Second, time.Second)},
				{time.Hour, 0, ok(10, 0)}, // idle again
			},
		),
	},
	{
		name:  "gcra counts an emission interval of a third of a second exactly",
		limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 3, Window: time.Second}, // T = 333333⅓ µs
		steps: []step{
			{0, 1, ok(2, 333334*time.Microsecond)},
			{0, 1, ok(1, 666667*time.Microsecond)},
			{0, 1, ok(0, time.Second)},
			{0, 1, deny(0, time.Second, 333334*time.Microsecond)},
			// One µs short of T: TAT − now = 666666⅔ µs, ⅓ µs too far.
			{333333 * time.Microsecond, 1, deny(0, 666667*time.Microsecond, time.Microsecond)},
			{time.Microsecond, 1, ok(0, time.Second)}, // TAT − now = 999999⅓ µs
			{3 * time.Second, 3, ok(0, time.Second)},
		},
	},
	{
		name:  "gcra emission interval below a microsecond",
		limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: algorithms.MaxLimit, Window: time.Second}, // T = 1 ps
		steps: []step{
			{0, algorithms.MaxLimit, ok(0, time.Second)},
			// 1 µs later exactly 10⁶ hits fit again.
			{time.Microsecond, 1_000_001, deny(1_000_000, 999999*time.Microsecond, time.Microsecond)},
			{0, 1_000_000, ok(0, time.Second)},
		},
	},
	{
		name:  "gcra hits above one and larger than the limit",
		limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 5, Window: time.Minute}, // T = 12 s
		steps: []step{
			{0, 6, deny(5, 0, 0)}, // never admitted; idle, so nothing to wait for
			{0, 3, ok(2, 36*time.Second)},
			{0, 3, deny(2, 36*time.Second, 12*time.Second)},
			{0, 2, ok(0, time.Minute)},
			{0, 1, deny(0, time.Minute, 12*time.Second)},
			{0, 6, deny(0, time.Minute, time.Minute)},
		},
	},
	{
		name:  "gcra peek changes nothing, and TAT in the past is idle",
		limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 4, Window: time.Second}, // T = 250 ms
		steps: []step{
			{0, 0, ok(4, 0)},
			{0, 1, ok(3, 250*time.Millisecond)},
			{0, 0, ok(3, 250*time.Millisecond)},
			{100 * time.Millisecond, 0, ok(3, 150*time.Millisecond)},
			{0, 3, ok(0, 900*time.Millisecond)},
			{0, 1, deny(0, 900*time.Millisecond, 150*time.Millisecond)},
			{250 * time.Millisecond, 1, ok(0, 900*time.Millisecond)},
			{time.Second, 0, ok(4, 0)},
			{0, 4, ok(0, time.Second)},
		},
	},
	{
		name:  "token bucket default refill is limit/60 without a window",
		limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 60},
		steps: []step{
			{0, 60, ok(0, time.Minute)},
			{0, 1, deny(0, time.Minute, time.Second)},
			{time.Second, 1, ok(0, time.Minute)},
		},
	},
}
