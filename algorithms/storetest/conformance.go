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
