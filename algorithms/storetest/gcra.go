package storetest

import (
	"context"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// gcraRef is GCRA in exact rationals: the definition, with none of the
// stores' integer units. GCRAExact holds the stores to it.
type gcraRef struct {
	limit, windowUS int64
	tat             *big.Rat      // nil: never admitted
	ttl             time.Duration // of the state at the last admission: max(reset, 1 ms)
}

func (g *gcraRef) decide(nowUS, hits int64) want {
	T := big.NewRat(g.windowUS, g.limit)
	now := new(big.Rat).SetInt64(nowUS)
	window := new(big.Rat).SetInt64(g.windowUS)
	level := new(big.Rat) // max(TAT − now, 0)
	if g.tat != nil && g.tat.Cmp(now) > 0 {
		level.Sub(g.tat, now)
	}
	cost := new(big.Rat).Mul(T, new(big.Rat).SetInt64(hits))
	var w want
	w.allowed = hits <= g.limit && new(big.Rat).Add(level, cost).Cmp(window) <= 0
	if w.allowed && hits > 0 {
		level.Add(level, cost)
		g.tat = new(big.Rat).Add(now, level)
	}
	w.remaining = ratFloor(new(big.Rat).Quo(new(big.Rat).Sub(window, level), T))
	w.reset = time.Duration(ratCeil(level)) * time.Microsecond
	if w.allowed && hits > 0 {
		g.ttl = max(w.reset, time.Millisecond)
	}
	if !w.allowed {
		w.retry = w.reset
		if hits <= g.limit {
			rest := new(big.Rat).Mul(T, new(big.Rat).SetInt64(g.limit-hits))
			w.retry = time.Duration(ratCeil(new(big.Rat).Sub(level, rest))) * time.Microsecond
		}
	}
	return w
}

// ratFloor returns ⌊r⌋ for r ≥ 0.
func ratFloor(r *big.Rat) int64 {
	return new(big.Int).Quo(r.Num(), r.Denom()).Int64()
}

// ratCeil returns ⌈r⌉ for r ≥ 0.
func ratCeil(r *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// GCRAExact drives GCRA limits whose emission interval is whole, a
// fraction of a microsecond, or far below one, and whose capacity comes
// within 10⁻⁶ of 2^53, with pseudo-random traffic, and checks every decision
// of every store against exact rational arithmetic: allowed, remaining,
// reset and retry, to the microsecond.
func GCRAExact(t *testing.T, factories []Factory) {
	limits := []algorithms.Limit{
		{Algorithm: algorithms.GCRA, Limit: 10, Window: 10 * time.Second},             // T = 1 s
		{Algorithm: algorithms.GCRA, Limit: 7, Window: time.Minute},                   // T = 8571428 4/7 µs
		{Algorithm: algorithms.GCRA, Limit: 3, Window: time.Second},                   // T = 333333 1/3 µs
		{Algorithm: algorithms.GCRA, Limit: 999_983, Window: 9 * time.Second},         // prime limit
		{Algorithm: algorithms.GCRA, Limit: algorithms.MaxLimit, Window: time.Second}, // T = 10⁻⁶ µs
		// Capacity 9007193×10⁹ units, just below 2^53 ≈ 9007199.25×10⁹.
		{Algorithm: algorithms.GCRA, Limit: 9_007_193, Window: 1000 * time.Second},
	}
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			for _, l := range limits {
				clock := NewClock(T0)
				s := f.New(t, clock.Now)
				key := algorithms.Key{Scope: UniqueScope(t), Identifier: "exact"}
				ref := &gcraRef{limit: l.Limit, windowUS: l.Window.Microseconds()}
				keep := f.keeper(t, s, algorithms.Request{Key: key, Limit: l})
				rng := rand.New(rand.NewPCG(uint64(l.Limit), 1))
				T := max(1, l.Window.Microseconds()/l.Limit)
				for i := range 300 {
					switch r := rng.IntN(10); {
					case r < 3:
					case r < 7:
						clock.Advance(time.Duration(rng.Int64N(2*T+1)) * time.Microsecond)
					case r < 9:
						clock.Advance(time.Duration(rng.Int64N(l.Window.Microseconds()/4)) * time.Microsecond)
					default:
						clock.Advance(time.Duration(rng.Int64N(2*l.Window.Microseconds())) * time.Microsecond)
					}
					var hits int64
					switch r := rng.IntN(10); {
					case r == 0:
					case r < 6:
						hits = 1
					case r < 8:
						hits = 1 + rng.Int64N(max(1, l.Limit/3))
					case r == 8:
						hits = l.Limit
					default:
						hits = min(l.Limit+1, algorithms.MaxLimit)
					}
					if g := ref.tat; g != nil && g.Cmp(new(big.Rat).SetInt64(clock.Now().UnixMicro())) > 0 && !keep.Exists() {
						// Expired on Redis's clock before persist took its TTL
						// off, so the store sees an idle identifier: only a
						// state with a short TTL may.
						if ref.ttl > 100*time.Millisecond {
							t.Fatalf("limit %d per %s, step %d: the state (TTL %s) is gone", l.Limit, l.Window, i, ref.ttl)
						}
						ref.tat = nil
					}
					wantD := ref.decide(clock.Now().UnixMicro(), hits)
					ds, err := s.Check(context.Background(), []algorithms.Request{{Key: key, Limit: l, Hits: hits}})
					if err != nil {
						t.Fatalf("limit %d per %s, step %d: %v", l.Limit, l.Window, i, err)
					}
					keep.Persist()
					got := want{ds[0].Allowed, ds[0].Remaining, ds[0].ResetAfter, ds[0].RetryAfter}
					if got != wantD {
						t.Fatalf("limit %d per %s, step %d (hits %d): got %+v, want %+v (exact)", l.Limit, l.Window, i, hits, got, wantD)
					}
				}
			}
		})
	}
}

// GCRARetryAfter checks that a rejected request is admitted RetryAfter later
// and not one microsecond sooner, for whole and fractional emission intervals.
func GCRARetryAfter(t *testing.T, factories []Factory) {
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			for _, l := range []algorithms.Limit{
				{Algorithm: algorithms.GCRA, Limit: 3, Window: time.Second},
				{Algorithm: algorithms.GCRA, Limit: 7, Window: time.Minute},
				{Algorithm: algorithms.GCRA, Limit: 999_983, Window: 9 * time.Second},         // T ≈ 9.00015 µs
				{Algorithm: algorithms.GCRA, Limit: algorithms.MaxLimit, Window: time.Second}, // T = 10⁻⁶ µs
			} {
				for _, hits := range []int64{1, 2, l.Limit} {
					clock := NewClock(T0)
					s := f.New(t, clock.Now)
					key := algorithms.Key{Scope: UniqueScope(t), Identifier: "retry"}
					keep := f.keeper(t, s, algorithms.Request{Key: key, Limit: l})
					at := func(us int64, hits int64) algorithms.Decision {
						t.Helper()
						clock.Advance(T0.Add(time.Duration(us) * time.Microsecond).Sub(clock.Now()))
						ds, err := s.Check(context.Background(), []algorithms.Request{{Key: key, Limit: l, Hits: hits}})
						if err != nil {
							t.Fatal(err)
						}
						keep.Persist()
						return ds[0]
					}
					if d := at(0, l.Limit); !d.Allowed {
						t.Fatalf("limit %d per %s: a full burst was denied", l.Limit, l.Window)
					}
					d := at(0, hits)
					if d.Allowed || d.RetryAfter <= 0 {
						t.Fatalf("limit %d per %s, hits %d: %+v, want denied with a retry", l.Limit, l.Window, hits, d)
					}
					retry := d.RetryAfter.Microseconds()
					if d := at(retry-1, hits); d.Allowed {
						t.Errorf("limit %d per %s, hits %d: admitted 1 µs before RetryAfter %v", l.Limit, l.Window, hits, d.RetryAfter)
					}
					if d := at(retry, hits); !d.Allowed {
						t.Errorf("limit %d per %s, hits %d: denied at RetryAfter %v: %+v", l.Limit, l.Window, hits, retry, d)
					}
				}
			}
		})
	}
}
