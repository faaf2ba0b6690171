package algorithms

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// gcraRef is GCRA in exact rationals: the definition, with none of the
// stores' integer units. TestGCRAExact holds the stores to it.
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

// TestGCRAExact drives GCRA limits whose emission interval is whole, a
// fraction of a microsecond, or far below one, and whose capacity comes
// within 10⁻⁶ of 2^53, with pseudo-random traffic, and checks every decision
// of every store against exact rational arithmetic: allowed, remaining,
// reset and retry, to the microsecond.
func TestGCRAExact(t *testing.T) {
	limits := []Limit{
		{Algorithm: GCRA, Limit: 10, Window: 10 * time.Second},     // T = 1 s
		{Algorithm: GCRA, Limit: 7, Window: time.Minute},           // T = 8571428 4/7 µs
		{Algorithm: GCRA, Limit: 3, Window: time.Second},           // T = 333333 1/3 µs
		{Algorithm: GCRA, Limit: 999_983, Window: 9 * time.Second}, // prime limit
		{Algorithm: GCRA, Limit: MaxLimit, Window: time.Second},    // T = 10⁻⁶ µs
		// Capacity 9007193×10⁹ units, just below 2^53 ≈ 9007199.25×10⁹.
		{Algorithm: GCRA, Limit: 9_007_193, Window: 1000 * time.Second},
	}
	for _, f := range storeFactories() {
		t.Run(f.name, func(t *testing.T) {
			for _, l := range limits {
				clock := &fakeClock{now: t0}
				s := f.make(t, clock.Now)
				key := Key{Scope: uniqueScope(t), Identifier: "exact"}
				ref := &gcraRef{limit: l.Limit, windowUS: l.Window.Microseconds()}
				keep := keeper(t, s, Request{Key: key, Limit: l})
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
						hits = min(l.Limit+1, MaxLimit)
					}
					if g := ref.tat; g != nil && g.Cmp(new(big.Rat).SetInt64(clock.Now().UnixMicro())) > 0 && !keep.exists() {
						// Expired on Redis's clock before persist took its TTL
						// off, so the store sees an idle identifier: only a
						// state with a short TTL may.
						if ref.ttl > 100*time.Millisecond {
							t.Fatalf("limit %d per %s, step %d: the state (TTL %s) is gone", l.Limit, l.Window, i, ref.ttl)
						}
						ref.tat = nil
					}
					wantD := ref.decide(clock.Now().UnixMicro(), hits)
					ds, err := s.Check(context.Background(), []Request{{Key: key, Limit: l, Hits: hits}})
					if err != nil {
						t.Fatalf("limit %d per %s, step %d: %v", l.Limit, l.Window, i, err)
					}
					keep.persist()
					got := want{ds[0].Allowed, ds[0].Remaining, ds[0].ResetAfter, ds[0].RetryAfter}
					if got != wantD {
						t.Fatalf("limit %d per %s, step %d (hits %d): got %+v, want %+v (exact)", l.Limit, l.Window, i, hits, got, wantD)
					}
				}
			}
		})
	}
}

// TestGCRARetryAfterIsExact: a rejected request is admitted RetryAfter later
// and not one microsecond sooner, for whole and fractional emission intervals.
func TestGCRARetryAfterIsExact(t *testing.T) {
	for _, f := range storeFactories() {
		t.Run(f.name, func(t *testing.T) {
			for _, l := range []Limit{
				{Algorithm: GCRA, Limit: 3, Window: time.Second},
				{Algorithm: GCRA, Limit: 7, Window: time.Minute},
				{Algorithm: GCRA, Limit: 999_983, Window: 9 * time.Second}, // T ≈ 9.00015 µs
				{Algorithm: GCRA, Limit: MaxLimit, Window: time.Second},    // T = 10⁻⁶ µs
			} {
				for _, hits := range []int64{1, 2, l.Limit} {
					clock := &fakeClock{now: t0}
					s := f.make(t, clock.Now)
					key := Key{Scope: uniqueScope(t), Identifier: "retry"}
					keep := keeper(t, s, Request{Key: key, Limit: l})
					at := func(us int64, hits int64) Decision {
						t.Helper()
						clock.Advance(t0.Add(time.Duration(us) * time.Microsecond).Sub(clock.Now()))
						ds, err := s.Check(context.Background(), []Request{{Key: key, Limit: l, Hits: hits}})
						if err != nil {
							t.Fatal(err)
						}
						keep.persist()
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

// stateKeeper takes the TTL off one request's state key on a RedisStore (a
// no-op for MemoryStore). Redis expires keys on its own clock, while these
// tests move a fake one: a key that must live 1 ms of fake time can vanish
// in the real milliseconds between two steps. Once persisted, only the fake
// clock decides, as in production only Redis's does. A key can still expire
// between the script's write and persist; exists tells, race-free, since a
// persisted key cannot expire any more.
type stateKeeper struct {
	t   *testing.T
	rdb *redis.Client // nil for MemoryStore
	key string
}

func keeper(t *testing.T, s Store, r Request) stateKeeper {
	t.Helper()
	k := stateKeeper{t: t}
	if u, ok := s.(unindexedStore); ok {
		s = u.Store
	}
	if rs, ok := s.(*RedisStore); ok {
		k.key = rs.stateKey(&r)
		k.rdb = newRedisClient(t, 1)
	}
	return k
}

// persist takes the TTL off the state key, if it exists.
func (k stateKeeper) persist() {
	k.t.Helper()
	if k.rdb == nil {
		return
	}
	if err := k.rdb.Persist(context.Background(), k.key).Err(); err != nil {
		k.t.Fatal(err)
	}
}

// exists reports whether the state key exists (always true in memory, where
// state expires on the fake clock).
func (k stateKeeper) exists() bool {
	k.t.Helper()
	if k.rdb == nil {
		return true
	}
	n, err := k.rdb.Exists(context.Background(), k.key).Result()
	if err != nil {
		k.t.Fatal(err)
	}
	return n == 1
}

// TestGCRAExactnessBound pins where GCRA stops being exact in a double: the
// capacity lcm(limit, window µs) must stay below 2^53.
func TestGCRAExactnessBound(t *testing.T) {
	cases := []struct {
		limit int64
		ok    bool
	}{
		{9_007_199, true},  // 9007199×10⁹ < 2^53 − 1
		{9_007_201, false}, // 9007201×10⁹ > 2^53
		{9_007_200, true},  // shares 100 with 10⁹: lcm 9007200×10⁷
	}
	for _, tc := range cases {
		err := Limit{Algorithm: GCRA, Limit: tc.limit, Window: 1000 * time.Second}.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("limit %d per 1000 s: Validate = %v, want ok %v", tc.limit, err, tc.ok)
		}
	}
}
