package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// splitDBs are the databases of the test Redis a Split's two sides use.
const mainDB, perSecondDB = 0, 1

// newDBClient connects to database db of the test Redis.
func newDBClient(t testing.TB, db int) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redistest.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.DB = db
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newSplit is a Split over two databases of the test Redis, each side a
// store with opts behind a Guard (open), and the two stores.
func newSplit(t *testing.T, opts Options) (*Split, [2]*Store) {
	t.Helper()
	var stores [2]*Store
	var guards [2]*Guard
	for i, db := range []int{mainDB, perSecondDB} {
		stores[i] = New(newDBClient(t, db), opts)
		t.Cleanup(stores[i].Close)
		var err error
		if guards[i], err = NewGuard(stores[i], GuardOptions{Mode: algorithms.FailOpen}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewSplit(Sides{Main: guards[0], PerSecond: guards[1]})
	if err != nil {
		t.Fatal(err)
	}
	return s, stores
}

// splitKeeper keeps a request's state on the side of the Split that holds it.
func splitKeeper(t *testing.T, s algorithms.Store, r algorithms.Request) storetest.Keeper {
	t.Helper()
	sp := storetest.Unwrap(s).(*Split)
	side, db := sp.sides[mainSide].store, mainDB
	if PerSecond(&r) {
		side, db = sp.sides[perSecondSide].store, perSecondDB
	}
	return stateKeeper{t: t, rdb: newDBClient(t, db), key: side.stateKey(&r)}
}

// TestSplitConformance runs the engine's contract on a Split: its
// per-second cases on one Redis, the others on another, each behind a
// Guard.
func TestSplitConformance(t *testing.T) {
	storetest.Contract(t, []storetest.Factory{
		{Name: "split", New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			s, _ := newSplit(t, Options{Now: clock})
			return s
		}, Keep: splitKeeper, Sweep: splitSweeper},
		{Name: "split-unindexed-coalesced", Unindexed: true, New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			s, _ := newSplit(t, Options{Now: clock, Coalesce: 2})
			return storetest.Unindexed(s)
		}, Keep: splitKeeper, Sweep: splitSweeper},
	})
}

// splitSweeper sweeps the holds of both sides of a Split.
func splitSweeper(t *testing.T, s algorithms.Store) {
	t.Helper()
	sp := storetest.Unwrap(s).(*Split)
	sweeper(t, sp.sides[mainSide].store)
	sweeper(t, sp.sides[perSecondSide].store)
}

// TestSplitGroups: a request tied across the two sides counts on neither
// when either side is over — whichever side, counted first and refunded
// (the Envoy path's counters) or atomically — and its keys are each on
// their side only.
func TestSplitGroups(t *testing.T) {
	for _, tt := range []struct {
		name      string
		unindexed bool
		alg       algorithms.Algorithm
	}{
		{"plain fixed window", true, algorithms.FixedWindow},
		{"plain sliding window", true, algorithms.SlidingWindow},
		{"script fixed window", false, algorithms.FixedWindow},
		{"token bucket", false, algorithms.TokenBucket},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			clock := storetest.NewClock(storetest.T0)
			s, stores := newSplit(t, Options{Now: clock.Now, Coalesce: 2})
			scope := uniqueScope(t)
			req := func(id string, limit int64, window time.Duration) algorithms.Request {
				return algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: id},
					Limit: algorithms.Limit{Algorithm: tt.alg, Limit: limit, Window: window}, Hits: 1,
					AllOrNothing: true, Unindexed: tt.unindexed, Counting: counting(tt.unindexed)}
			}
			for _, narrow := range []time.Duration{time.Second, time.Minute} {
				wide := time.Minute
				if narrow == time.Minute {
					wide = time.Second
				}
				nid, wid := fmt.Sprint("narrow-", narrow), fmt.Sprint("wide-", narrow) // as named below
				var got []string
				for range 3 {
					ds, err := s.Check(ctx, []algorithms.Request{req(wid, 100, wide), req(nid, 1, narrow)})
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, fmt.Sprintf("%v/%v %v/%v", ds[0].Allowed, ds[0].Counted, ds[1].Allowed, ds[1].Counted))
				}
				want := []string{"true/true true/true", "true/false false/false", "true/false false/false"}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("narrow %v: allowed/counted (wide narrow) = %v, want %v", narrow, got, want)
				}
				// The wide limit counted the first request only.
				ds, err := s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: wid},
					Limit: algorithms.Limit{Algorithm: tt.alg, Limit: 100, Window: wide}, Unindexed: tt.unindexed, Counting: counting(tt.unindexed)}})
				if err != nil {
					t.Fatal(err)
				}
				if ds[0].Remaining != 99 {
					t.Errorf("narrow %v: the wide limit has %d remaining, want 99: a void group's hits must be taken back on the other Redis", narrow, ds[0].Remaining)
				}
			}
			// Each limit's keys are on its side's Redis, and only there.
			for _, r := range []algorithms.Request{req("narrow-1s", 1, time.Second), req("wide-1s", 100, time.Minute),
				req("narrow-1m0s", 1, time.Minute), req("wide-1m0s", 100, time.Second)} {
				for i, st := range stores {
					keys, err := st.rdb.Keys(ctx, st.stateKey(&r)+"*").Result()
					if err != nil {
						t.Fatal(err)
					}
					if want := PerSecond(&r) == (i == 1); (len(keys) > 0) != want {
						t.Errorf("%s per %v: keys %q on the %s Redis, want some: %v", r.Key.Identifier, r.Limit.Window, keys, []string{"main", "per-second"}[i], want)
					}
				}
			}
		})
	}
}

// counting is the regime of a test's requests: count first when unindexed.
func counting(unindexed bool) algorithms.Counting {
	if unindexed {
		return algorithms.CountThenRefund
	}
	return algorithms.Atomic
}

// TestExpirationJitter: with Options.ExpirationJitter, the counters the
// count-first regime makes expire up to that much after their window's end,
// spread over the span (the reference's EXPIRATION_JITTER_MAX_SECONDS);
// without it, at the end (checkExpiresAfterWindows).
func TestExpirationJitter(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisClient(t, 0)
	const jitter = 300 * time.Second
	s := New(rdb, Options{ExpirationJitter: jitter})
	scope := uniqueScope(t)
	var extra []time.Duration
	for i := range 40 {
		r := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: fmt.Sprint(i)},
			Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute},
			Hits:  1, Unindexed: true, Counting: algorithms.CountThenRefund}
		ds, err := s.Check(ctx, []algorithms.Request{r})
		if err != nil {
			t.Fatal(err)
		}
		key := s.windowKey(&r, ds[0].Now.UnixMicro())
		pttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		end := ds[0].Now.Truncate(time.Minute).Add(time.Minute)
		e := ds[0].Now.Add(pttl).Sub(end)
		if e < -50*time.Millisecond || e > jitter+expiryMargin+50*time.Millisecond {
			t.Fatalf("counter %s expires %v after its window, want within [0, %v]", key, e, jitter+expiryMargin)
		}
		extra = append(extra, e)
	}
	lo, hi := extra[0], extra[0]
	for _, e := range extra {
		lo, hi = min(lo, e), max(hi, e)
	}
	if hi-lo < jitter/4 {
		t.Errorf("the counters expire %v to %v after their window: not spread over %v", lo, hi, jitter)
	}
}

// TestSecondGuardMetrics: a second store and guard of the process (the
// per-second Redis) register on the same registry, the guard's backend
// series apart.
func TestSecondGuardMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, backend := range []string{"redis", "redis_per_second"} {
		s := New(newRedisClient(t, 1), Options{})
		t.Cleanup(s.Close)
		if err := s.RegisterMetrics(reg); err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
		if _, err := NewGuard(s, GuardOptions{Mode: algorithms.FailOpen, Backend: backend, Registerer: reg}); err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "throttle_backend_circuit_open" && len(mf.GetMetric()) != 2 {
			t.Errorf("throttle_backend_circuit_open has %d series, want one per backend", len(mf.GetMetric()))
		}
	}
}

// globalDB is the database of the test Redis the global side uses.
const globalDB = 2

// TestSplitGlobal: a limit of scope global is counted in the global Redis
// whatever its window, decided from memory there; every other limit where
// it was (a one-second window on the per-second Redis when there is one,
// else on the main one); the global store's metrics are its own.
func TestSplitGlobal(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	dbs := []int{mainDB, perSecondDB, globalDB}
	var stores [3]*Store
	var guards [3]*Guard
	for i, db := range dbs {
		stores[i] = New(newDBClient(t, db), Options{Global: db == globalDB})
		t.Cleanup(stores[i].Close)
		if err := stores[i].RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
		var err error
		if guards[i], err = NewGuard(stores[i], GuardOptions{Mode: algorithms.FailOpen, Backend: fmt.Sprint("redis", i), Registerer: reg}); err != nil {
			t.Fatal(err)
		}
	}
	scope := uniqueScope(t)
	req := func(id string, window time.Duration, global bool) algorithms.Request {
		l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: window, Global: global}
		if global {
			l.Accuracy = algorithms.Approximate
		}
		return algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: id}, Limit: l, Hits: 1}
	}
	for _, tt := range []struct {
		name  string
		sides Sides
		// want is the database of each request's counter.
		want [4]int
	}{
		{"main, per-second, global", Sides{Main: guards[0], PerSecond: guards[1], Global: guards[2]}, [4]int{mainDB, perSecondDB, globalDB, globalDB}},
		{"main, global", Sides{Main: guards[0], Global: guards[2]}, [4]int{mainDB, mainDB, globalDB, globalDB}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSplit(tt.sides)
			if err != nil {
				t.Fatal(err)
			}
			reqs := []algorithms.Request{req(tt.name+"/minute", time.Minute, false), req(tt.name+"/second", time.Second, false),
				req(tt.name+"/global-minute", time.Minute, true), req(tt.name+"/global-second", time.Second, true)}
			for range 3 {
				ds, err := s.Check(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				for i, d := range ds {
					if !d.Allowed {
						t.Fatalf("%s refused: %+v", reqs[i].Key.Identifier, d)
					}
				}
			}
			if err := stores[2].Drain(ctx); err != nil { // the global hits go to Redis
				t.Fatal(err)
			}
			for i, r := range reqs {
				for j, st := range stores {
					keys, err := st.rdb.Keys(ctx, st.stateKey(&r)+"*").Result()
					if err != nil {
						t.Fatal(err)
					}
					if want := dbs[j] == tt.want[i]; (len(keys) > 0) != want {
						t.Errorf("%s: keys %q in database %d, want some: %v", r.Key.Identifier, keys, dbs[j], want)
					}
				}
			}
			// The global minute counter holds the three hits, nothing leased
			// (the store drained).
			st := stores[2]
			r := reqs[2]
			if r.Limit.Window == time.Minute {
				keys, _ := st.rdb.Keys(ctx, st.stateKey(&r)+"*").Result()
				var total int64
				for _, k := range keys {
					if n, err := st.rdb.Get(ctx, k).Int64(); err == nil {
						total += n
					}
				}
				if tt.name == "main, per-second, global" && total != 3 {
					t.Errorf("the global minute counter's keys %q hold %d, want 3", keys, total)
				}
			}
		})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"throttle_global_round_trip_seconds", "throttle_global_leased_hits", "throttle_global_blind_hits_total", "throttle_approximate_leased_hits", "throttle_approximate_round_trip_seconds"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
}
