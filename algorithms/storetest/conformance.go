package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

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

func Decisions(t *testing.T, factories []Factory) {
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			for _, tc := range conformanceCases {
				t.Run(tc.name, func(t *testing.T) {
					clock := NewClock(T0)
					s := f.New(t, clock.Now)
					key := algorithms.Key{Scope: UniqueScope(t), Identifier: "user_123"}
					for i, st := range tc.steps {
						clock.Advance(st.advance)
						ds, err := s.Check(context.Background(), []algorithms.Request{{Key: key, Limit: tc.limit, Hits: st.hits}})
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						d := ds[0]
						got := want{d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter}
						if got != st.want {
							t.Fatalf("step %d (hits %d): got %+v, want %+v", i, st.hits, got, st.want)
						}
						if d.Limit != tc.limit.Limit {
							t.Errorf("step %d: Limit = %d, want %d", i, d.Limit, tc.limit.Limit)
						}
						if !d.Now.Equal(clock.Now()) {
							t.Errorf("step %d: Now = %v, want %v", i, d.Now, clock.Now())
						}
					}
				})
			}
		})
	}
}

// Batch checks that a batch decides each request as if alone,
// in order, and that one bad request fails the batch before anything counts.
func Batch(t *testing.T, factories []Factory) {
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			clock := NewClock(T0)
			s := f.New(t, clock.Now)
			scope := UniqueScope(t)
			ctx := context.Background()
			fw := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Minute}
			tb := algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, Window: time.Minute}
			batch := []algorithms.Request{
				{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: fw, Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: fw, Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: fw, Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "b"}, Limit: tb, Hits: 1},
			}
			ds, err := s.Check(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			gotAllowed := []bool{}
			for _, d := range ds {
				gotAllowed = append(gotAllowed, d.Allowed)
			}
			if fmt.Sprint(gotAllowed) != "[true true false true]" {
				t.Fatalf("allowed = %v, want [true true false true]", gotAllowed)
			}

			bad := []algorithms.Request{
				{Key: algorithms.Key{Scope: scope, Identifier: "c"}, Limit: fw, Hits: 1},
				{Key: algorithms.Key{Scope: scope, Identifier: "c"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 0, Window: time.Minute}, Hits: 1},
			}
			if _, err := s.Check(ctx, bad); !errors.Is(err, algorithms.ErrInvalid) {
				t.Fatalf("bad batch: err = %v, want ErrInvalid", err)
			}
			ds, err = s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: "c"}, Limit: fw, Hits: 0}})
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Remaining != 2 {
				t.Errorf("after a refused batch remaining = %d, want 2 (nothing counted)", ds[0].Remaining)
			}
			if ds, err := s.Check(ctx, nil); err != nil || len(ds) != 0 {
				t.Errorf("empty batch = %v, %v; want no decisions, no error", ds, err)
			}
		})
	}
}

// Isolation checks that state is shared exactly when keys are
// equal: different limits, names, scopes and identifiers never collide, even
// when their text would join to the same string.
func Isolation(t *testing.T, factories []Factory) {
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			clock := NewClock(T0)
			s := f.New(t, clock.Now)
			scope := UniqueScope(t)
			ctx := context.Background()
			minute := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}
			hour := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}
			keys := []struct {
				key   algorithms.Key
				limit algorithms.Limit
			}{
				{algorithms.Key{Scope: scope, Identifier: "bob"}, minute},
				{algorithms.Key{Scope: scope, Identifier: "bob"}, hour},
				{algorithms.Key{Scope: scope, Identifier: "bob", Name: "rule-a"}, minute},
				{algorithms.Key{Scope: scope, Identifier: "bob", Name: "rule-b"}, minute},
				{algorithms.Key{Scope: scope, Identifier: "bob:1"}, minute},
				{algorithms.Key{Scope: scope + ":bob", Identifier: "1"}, minute},
				{algorithms.Key{Scope: scope, Identifier: "bob}"}, minute},
				{algorithms.Key{Scope: scope, Identifier: "bob%3A1"}, minute},
				{algorithms.Key{Scope: scope, Identifier: "bob"}, algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 1, Window: time.Minute}},
				{algorithms.Key{Scope: scope, Identifier: "bob"}, algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, Window: time.Minute}},
				{algorithms.Key{Scope: scope, Identifier: "bob"}, algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: 0.5}},
				{algorithms.Key{Scope: scope, Identifier: "bob"}, algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1, Window: time.Minute}},
				{algorithms.Key{Scope: scope, Identifier: "bob"}, algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1, Window: time.Hour}},
				{algorithms.Key{Scope: scope, Identifier: "bob", Name: "rule-a"}, algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1, Window: time.Minute}},
			}
			for i, k := range keys {
				ds, err := s.Check(ctx, []algorithms.Request{{Key: k.key, Limit: k.limit, Hits: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if !ds[0].Allowed {
					t.Errorf("key %d %+v %+v: denied on its first request: it shares state with an earlier key", i, k.key, k.limit)
				}
			}
		})
	}
}

func Reset(t *testing.T, factories []Factory) {
	for _, f := range factories {
		if f.Unindexed {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			clock := NewClock(T0)
			s := f.New(t, clock.Now)
			scope := UniqueScope(t)
			ctx := context.Background()
			fw := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}
			sw := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 1, Window: time.Minute}
			tb := algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, Window: time.Minute}
			gc := algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1, Window: time.Minute}
			use := func(id, name string, l algorithms.Limit) {
				t.Helper()
				if _, err := s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: id, Name: name}, Limit: l, Hits: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			allowed := func(id, name string, l algorithms.Limit) bool {
				t.Helper()
				ds, err := s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: id, Name: name}, Limit: l, Hits: 0}})
				if err != nil {
					t.Fatal(err)
				}
				return ds[0].Remaining == l.Limit
			}
			use("bob", "", fw)
			use("bob", "r1", fw)
			use("bob", "", sw)
			use("bob", "", tb)
			use("bob", "", gc)
			use("bob", "r1", gc)
			use("bob:1", "", fw)
			use("bo", "", fw)

			n, err := s.Reset(ctx, scope, "bob", algorithms.FixedWindow)
			if err != nil || n != 2 {
				t.Fatalf("Reset(bob, fixed_window) = %d, %v; want 2, nil", n, err)
			}
			if !allowed("bob", "", fw) || !allowed("bob", "r1", fw) {
				t.Error("bob's fixed windows still counted after reset")
			}
			if allowed("bob", "", sw) || allowed("bob", "", tb) || allowed("bob", "", gc) {
				t.Error("reset of fixed_window also reset other algorithms")
			}
			n, err = s.Reset(ctx, scope, "bob", algorithms.GCRA)
			if err != nil || n != 2 {
				t.Fatalf("Reset(bob, gcra) = %d, %v; want 2, nil", n, err)
			}
			if !allowed("bob", "", gc) || !allowed("bob", "r1", gc) {
				t.Error("bob's gcra limits still counted after reset")
			}
			n, err = s.Reset(ctx, scope, "bob", "")
			if err != nil || n != 2 {
				t.Fatalf("Reset(bob) = %d, %v; want 2, nil", n, err)
			}
			if !allowed("bob", "", sw) || !allowed("bob", "", tb) {
				t.Error("bob still counted after a full reset")
			}
			if allowed("bob:1", "", fw) || allowed("bo", "", fw) {
				t.Error("resetting bob touched bob:1 or bo")
			}
			n, err = s.Reset(ctx, scope, "nobody", "")
			if err != nil || n != 0 {
				t.Errorf("Reset(nobody) = %d, %v; want 0, nil", n, err)
			}
			if _, err := s.Reset(ctx, scope, "bob", "leaky_bucket"); !errors.Is(err, algorithms.ErrInvalid) {
				t.Errorf("Reset with unknown algorithm: err = %v, want ErrInvalid", err)
			}
		})
	}
}

func Invalid(t *testing.T, factories []Factory) {
	key := algorithms.Key{Scope: "s", Identifier: "i"}
	cases := []struct {
		name string
		req  algorithms.Request
	}{
		{"limit zero", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 0, Window: time.Minute}, Hits: 1}},
		{"limit negative", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: -5, Window: time.Minute}, Hits: 1}},
		{"limit too large", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: algorithms.MaxLimit + 1, Window: time.Minute}, Hits: 1}},
		{"window zero", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1}, Hits: 1}},
		{"window negative", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 1, Window: -time.Second}, Hits: 1}},
		{"window too long", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: algorithms.MaxWindow + 1}, Hits: 1}},
		{"token bucket negative window", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, Window: -time.Second}, Hits: 1}},
		{"refill NaN", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: math.NaN()}, Hits: 1}},
		{"refill negative", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: -1}, Hits: 1}},
		{"refill infinite", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: math.Inf(1)}, Hits: 1}},
		{"refill absurd", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: 1e12}, Hits: 1}},
		{"gcra without window", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1}, Hits: 1}},
		// lcm(999999937, 366 days in µs) ≈ 3×10²² cannot be counted exactly.
		{"gcra too fine to count exactly", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 999_999_937, Window: algorithms.MaxWindow}, Hits: 1}},
		{"unknown algorithm", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: "leaky_bucket", Limit: 1, Window: time.Minute}, Hits: 1}},
		{"empty algorithm", algorithms.Request{Key: key, Limit: algorithms.Limit{Limit: 1, Window: time.Minute}, Hits: 1}},
		{"hits below -algorithms.MaxLimit", algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}, Hits: -algorithms.MaxLimit - 1}},
		{"empty identifier", algorithms.Request{Key: algorithms.Key{Scope: "s"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}, Hits: 1}},
		{"empty scope", algorithms.Request{Key: algorithms.Key{Identifier: "i"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}, Hits: 1}},
	}
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			s := f.New(t, nil)
			for _, tc := range cases {
				ds, err := s.Check(context.Background(), []algorithms.Request{tc.req})
				if !errors.Is(err, algorithms.ErrInvalid) {
					t.Errorf("%s: err = %v, decisions %v; want an error wrapping ErrInvalid", tc.name, err, ds)
				}
			}
		})
	}
}
