package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// Leases under bursts: replicas started together right before a burst
// offered as fast as they answer admit the limit, not more than the blind
// budgets past it, and Redis never holds more than the limit admitted and
// leased; half the limit in a moment across two replicas is all admitted.

// burst sends req through the stores as fast as they answer:
// weights[i % len(weights)] callers on store i, until calls are sent in
// all, and for at least d. It returns how many were admitted, and the most
// the window's counter held while it ran (sampled on rdb).
func burst(t *testing.T, stores []*Store, weights []int, req algorithms.Request, calls int, d time.Duration, rdb redis.UniversalClient, key string) (admitted, most int64) {
	t.Helper()
	end := time.Now().Add(d)
	var sent, ok atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for i, s := range stores {
		for range weights[i%len(weights)] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sent.Add(1) <= int64(calls) || time.Now().Before(end) {
					ds, err := s.Check(context.Background(), []algorithms.Request{req})
					if err != nil {
						failed.Store(err)
						return
					}
					if ds[0].Allowed {
						ok.Add(1)
					}
				}
			}()
		}
	}
	stop := make(chan struct{})
	sampled := make(chan int64)
	go func() {
		var most int64
		for {
			if n, err := rdb.Get(context.Background(), key).Int64(); err == nil {
				most = max(most, n)
			}
			select {
			case <-stop:
				sampled <- most
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(stop)
	most = <-sampled
	if err, isErr := failed.Load().(error); isErr {
		t.Fatal(err)
	}
	return ok.Load(), most
}

// roomIn waits, when less than need is left of the current window, for the
// next one to start.
func roomIn(window, need time.Duration) {
	now := time.Now()
	if end := now.Truncate(window).Add(window); end.Sub(now) < need {
		time.Sleep(time.Until(end) + 10*time.Millisecond)
	}
}

// TestApproximateBurst: 1, 3 and 8 replicas started together, the calls
// split 1:3:5 over them, offered as fast as they answer for four sync
// intervals (a lease is about two intervals of a replica's rate: a burst
// that stops sooner leaves leases unspent until they go back at the next
// sync), on one Redis and a Cluster, fixed and sliding windows, syncing
// every 100 ms and 500 ms: the window admits the limit within 1 %, never
// more than the blind budgets (limit / 128) past it; while it runs Redis
// never counts more than that admitted and leased; drained, it counts
// exactly what was admitted.
func TestApproximateBurst(t *testing.T) {
	const limit = 2000
	single, cluster := singleRedis, newClusterClient
	cases := []struct {
		name     string
		replicas int
		alg      algorithms.Algorithm
		interval time.Duration
		client   func(t *testing.T) redis.UniversalClient
	}{
		{"1 replica", 1, algorithms.FixedWindow, 100 * time.Millisecond, single},
		{"3 replicas", 3, algorithms.FixedWindow, 100 * time.Millisecond, single},
		{"8 replicas", 8, algorithms.FixedWindow, 100 * time.Millisecond, single},
		{"3 replicas sliding", 3, algorithms.SlidingWindow, 100 * time.Millisecond, single},
		{"8 replicas sliding", 8, algorithms.SlidingWindow, 100 * time.Millisecond, single},
		{"3 replicas 500ms", 3, algorithms.FixedWindow, 500 * time.Millisecond, single},
		{"8 replicas sliding 500ms", 8, algorithms.SlidingWindow, 500 * time.Millisecond, single},
		{"3 replicas on a cluster", 3, algorithms.FixedWindow, 100 * time.Millisecond, cluster},
		{"3 replicas sliding on a cluster 500ms", 3, algorithms.SlidingWindow, 500 * time.Millisecond, cluster},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.client(t)
			req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "hot"}, Hits: 1, Unindexed: true,
				Limit: algorithms.Limit{Algorithm: tc.alg, Limit: limit, Window: time.Minute, Accuracy: algorithms.Approximate}}
			roomIn(time.Minute, 20*time.Second)
			var stores []*Store
			for range tc.replicas {
				s := New(rdb, Options{ApproximateInterval: tc.interval})
				t.Cleanup(s.Close)
				stores = append(stores, s)
			}
			start := time.Now().UnixMicro()
			key := stores[0].windowKey(&req, start)
			admitted, most := burst(t, stores, []int{1, 3, 5}, req, 6*limit, 4*tc.interval, rdb, key)
			for _, s := range stores {
				if err := s.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			inRedis, err := rdb.Get(context.Background(), key).Int64()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("admitted %d of %d (%+.2f %%); Redis counted at most %d while it ran, %d drained", admitted, limit, float64(admitted-limit)*100/limit, most, inRedis)
			if blind := int64(limit / blindParts); admitted < limit*99/100 || admitted > limit+blind {
				t.Errorf("admitted %d, want %d..%d (1 %% under, the blind budgets over)", admitted, limit*99/100, limit+blind)
			}
			if most > limit+limit/blindParts {
				t.Errorf("Redis counted %d admitted and leased, over the limit %d by more than the blind budgets", most, limit)
			}
			if inRedis != admitted {
				t.Errorf("drained, Redis counts %d, the replicas admitted %d", inRedis, admitted)
			}
		})
	}
}

// TestApproximateNoFalseRefusals: a key whose hits stay below its limit is
// never refused, however fast they come: half the limit at once across 2
// replicas, each asking Redis as its lease runs out, is all admitted — on
// replicas just started (exact until they know the replica count, then no
// blind budget until it settles) and on settled ones.
func TestApproximateNoFalseRefusals(t *testing.T) {
	const limit = 2000
	rdb := newRedisClient(t, 0)
	for _, settled := range []bool{false, true} {
		for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow} {
			stores := []*Store{New(rdb, Options{}), New(rdb, Options{})}
			for _, s := range stores {
				t.Cleanup(s.Close)
				if settled {
					waitSettled(t, s)
				}
			}
			req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "half"}, Hits: 1, Unindexed: true,
				Limit: algorithms.Limit{Algorithm: alg, Limit: limit, Window: time.Minute, Accuracy: algorithms.Approximate}}
			roomIn(time.Minute, 10*time.Second)
			began := time.Now()
			admitted, _ := burst(t, stores, []int{8}, req, limit/2, 0, rdb, stores[0].windowKey(&req, began.UnixMicro()))
			t.Logf("settled %v, %s: %d of %d admitted in %s", settled, alg, admitted, limit/2, time.Since(began))
			if admitted != limit/2 {
				t.Errorf("settled %v, %s: %d of %d admitted, want all", settled, alg, admitted, limit/2)
			}
		}
	}
}

// TestApproximateAskShared: callers of one key whose lease is spent share
// the ask in flight: with Redis paused while it is out, 50 callers who
// come meanwhile wait for its answer rather than each ask, and all are
// admitted once it comes.
func TestApproximateAskShared(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, srv.URL())
	s := New(rdb, Options{})
	t.Cleanup(s.Close)
	waitSettled(t, s)
	req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "shared"}, Hits: 1, Unindexed: true,
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Hour, Accuracy: algorithms.Approximate}}
	// A limit of 100: no blind budget (100 / 128 < 1), the first hit asks.
	if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds, err := s.Check(context.Background(), []algorithms.Request{req})
			if err == nil && ds[0].Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	c := s.approxMetrics.askCounters
	asks := counterValue(t, c.granted) + counterValue(t, c.exhausted) + counterValue(t, c.failed)
	t.Logf("50 callers: %d admitted, %v asks", admitted.Load(), asks)
	if admitted.Load() != 50 {
		t.Errorf("%d of 50 admitted, want all (100 is the limit)", admitted.Load())
	}
	if asks > 5 {
		t.Errorf("50 callers of one key made %v asks, want them to share (at most 5)", asks)
	}
}

// counterValue is c's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestApproximateLeaseScript: approx.lua's arithmetic, call by call, for
// two replicas (a and b) of one limit of 100: a lease is capped by what is
// left divided among the replicas (an ask's need never raises it; never
// past what is left); reported hits come out of the lease first, the rest are
// added; the unused part of a lease goes back; a counter reset takes its
// leases with it.
func TestApproximateLeaseScript(t *testing.T) {
	ctx := context.Background()
	p := newScriptReplicas(t)
	rdb, a, b, req, num := p.rdb, p.a, p.b, p.req, p.num
	reported := map[*Store]int64{} // each replica's running total, as approxWindow.reported
	call := func(s *Store, hits, target, need int64) [2]int64 {
		t.Helper()
		reported[s] += hits
		res := p.call(t, s, approxOp{hits: hits, target: target, need: need, reported: reported[s]})
		return [2]int64{res[2], res[3]} // the counter, the lease
	}
	steps := []struct {
		name               string
		s                  *Store
		hits, target, need int64
		want               [2]int64
	}{
		{"a wants 80: capped at half of 100", a, 0, 80, 0, [2]int64{50, 50}},
		{"a spent 30 of it and wants 10: 10 go back", a, 30, 10, 0, [2]int64{40, 10}},
		{"a spent 15 (10 leased, 5 blind) and wants 100: half of 55", a, 15, 100, 0, [2]int64{73, 28}},
		{"b wants 100: half of the 27 left", b, 0, 100, 0, [2]int64{87, 14}},
		{"b spent its 14 and asks, needing 20: its share of the 13 left, 7, never more", b, 14, 20, 20, [2]int64{94, 7}},
		{"a spent its 28 and asks with 6 left: its share, 3", a, 28, 20, 1, [2]int64{97, 3}},
		{"b leaves, 3 of its 7 spent: 4 go back", b, 3, 0, 0, [2]int64{93, 0}},
		{"a wants 50: half of the 10 left", a, 0, 50, 0, [2]int64{95, 5}},
	}
	for _, st := range steps {
		if got := call(st.s, st.hits, st.target, st.need); got != st.want {
			t.Fatalf("%s: counter, lease = %v, want %v", st.name, got, st.want)
		}
	}
	// A reset: the counter gone, a's lease is gone with it; what b
	// reports next is added.
	if err := rdb.Del(ctx, a.windowKey(&req, num*time.Hour.Microseconds())).Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := call(b, 5, 0, 0), [2]int64{5, 0}; got != want {
		t.Errorf("b reports 5 after a reset: counter, lease = %v, want %v", got, want)
	}
	if h := rdb.HGetAll(ctx, a.leaseKey(&req, num)).Val(); len(h) != 1 || h["r:"+b.syncer.id] != "22" {
		t.Errorf("after the reset the lease hash is %v, want only b's running total, 22", h)
	}

	// A sliding window: what is left is the limit less the previous
	// window's count, weighted by how much of it still overlaps (all of
	// it at the window's start, none once the window is over).
	sliding := req
	sliding.Limit.Algorithm = algorithms.SlidingWindow
	wUS := time.Hour.Microseconds()
	for _, tc := range []struct {
		name string
		num  int64
		want int64
	}{
		{"at its start", num + 1, 20}, // (a window Redis's clock has not reached: elapsed 0)
		{"once over", num - 1, 50},
	} {
		prev := a.windowKey(&sliding, (tc.num-1)*wUS)
		if err := rdb.Set(ctx, prev, 60, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		ops := []approxOp{{e: &approxEntry{req: sliding}, num: tc.num, target: 100, ttlMS: 60_000, leaseTTL: a.approx.leaseTTL(&sliding.Limit),
			key: a.windowKey(&sliding, tc.num*wUS), prevKey: prev, leaseKey: a.leaseKey(&sliding, tc.num)}}
		res, err := a.syncer.call(ctx, singleMaster(a), ops, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		if got := res[3]; got != tc.want || res[4] != 60 {
			t.Errorf("sliding, previous window 60 of 100, %s: lease %d (previous %d), want %d (60)", tc.name, got, res[4], tc.want)
		}
		rdb.Del(ctx, prev, ops[0].key, ops[0].leaseKey)
	}
}

// scriptReplicas are two replicas (a and b) of one approximate limit of
// 100 an hour, calling approx.lua directly.
type scriptReplicas struct {
	rdb  *redis.Client
	a, b *Store
	req  algorithms.Request
	num  int64 // the current window
}

func newScriptReplicas(t *testing.T) *scriptReplicas {
	rdb := newRedisClient(t, 0)
	a, b := New(rdb, Options{}), New(rdb, Options{})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	return &scriptReplicas{rdb: rdb, a: a, b: b, num: time.Now().UnixMicro() / time.Hour.Microseconds(),
		req: algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u"}, Unindexed: true,
			Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Hour, Accuracy: algorithms.Approximate}}}
}

// call runs op (its hits, target, need and running total) on the current
// window as s, one of two replicas, and returns the script's reply.
func (p *scriptReplicas) call(t *testing.T, s *Store, op approxOp) []int64 {
	t.Helper()
	s.approx.replicas.Store(2)
	s.approx.settled.Store(true)
	op.e, op.num, op.ttlMS, op.leaseTTL = &approxEntry{req: p.req}, p.num, 60_000, s.approx.leaseTTL(&p.req.Limit)
	op.key, op.leaseKey = s.windowKey(&p.req, p.num*time.Hour.Microseconds()), s.leaseKey(&p.req, p.num)
	res, err := s.syncer.call(context.Background(), singleMaster(s), []approxOp{op}, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestApproximateReportOnce: a report is counted once. A call that
// reached Redis with its answer lost is sent again with the hits after it
// (the replica's running total grown by them): only those count; a call
// that arrives after a later one adds nothing; each replica's total is its
// own. Hits taken back after a call carried them (approxWindow.takeBack)
// come off the counter once, by a running total of their own.
func TestApproximateReportOnce(t *testing.T) {
	p := newScriptReplicas(t)
	a, b := p.a, p.b
	for _, st := range []struct {
		name string
		s    *Store
		op   approxOp // its hits, reported, back and backNew
		want int64
	}{
		{"a reports 10", a, approxOp{hits: 10, reported: 10}, 10},
		{"its answer lost, a sends them again with 5 more", a, approxOp{hits: 15, reported: 15}, 15},
		{"the same call once more", a, approxOp{hits: 15, reported: 15}, 15},
		{"the first call arrives late", a, approxOp{hits: 10, reported: 10}, 15},
		{"b reports 7 of its own", b, approxOp{hits: 7, reported: 7}, 22},
		{"a reports 3 more", a, approxOp{hits: 3, reported: 18}, 25},
		{"a takes 2 back, nothing new", a, approxOp{reported: 18, back: 2, backNew: 2}, 23},
		{"its answer lost, a sends it again", a, approxOp{reported: 18, back: 2, backNew: 2}, 23},
		{"a reports 5 more and takes 1 back", a, approxOp{hits: 5, reported: 23, back: 3, backNew: 1}, 27},
		{"b takes 1 back", b, approxOp{reported: 7, back: 1, backNew: 1}, 26},
	} {
		if got := p.call(t, st.s, st.op)[2]; got != st.want {
			t.Fatalf("%s: counter %d, want %d", st.name, got, st.want)
		}
	}
	// A reset: the counter gone with its totals; what a takes back of hits
	// it sent before is not taken from the new counter.
	if err := p.rdb.Del(context.Background(), a.windowKey(&p.req, p.num*time.Hour.Microseconds())).Err(); err != nil {
		t.Fatal(err)
	}
	if got := p.call(t, a, approxOp{hits: 4, reported: 27, back: 4, backNew: 1})[2]; got != 4 {
		t.Errorf("after a reset, a reports 4 and takes 1 back: counter %d, want 4", got)
	}
}

// TestApproximateLeaseExpiry: a lease its holder does not renew within the
// lease TTL goes back to the pool at the next call of any replica (a dead
// replica costs the others at most one TTL); hits its holder spent of it
// before it expired, reported late, are counted on top (Redis gave the
// lease back); and what reported hits take past the limit is answered as
// the excess Redis saw.
func TestApproximateLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisClient(t, 0)
	opts := Options{ApproximateInterval: 50 * time.Millisecond}
	a, b := New(rdb, opts), New(rdb, opts)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u"}, Unindexed: true,
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Hour, Accuracy: algorithms.Approximate}}
	ttl := a.approx.leaseTTL(&req.Limit)
	if ttl != 550*time.Millisecond {
		t.Fatalf("lease TTL at a 50 ms interval = %v, want 550ms (the call timeout and an interval)", ttl)
	}
	num := time.Now().UnixMicro() / time.Hour.Microseconds()
	e := &approxEntry{req: req}
	call := func(s *Store, hits, target int64) [3]int64 {
		t.Helper()
		s.approx.replicas.Store(2)
		s.approx.settled.Store(true)
		ops := []approxOp{{e: e, num: num, hits: hits, target: target, ttlMS: 60_000, leaseTTL: s.approx.leaseTTL(&req.Limit),
			key: s.windowKey(&req, num*time.Hour.Microseconds()), leaseKey: s.leaseKey(&req, num)}}
		res, err := s.syncer.call(ctx, singleMaster(s), ops, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return [3]int64{res[2], res[3], res[5]} // the counter, the lease, the excess
	}
	if got, want := call(a, 0, 50), [3]int64{50, 50, 0}; got != want {
		t.Fatalf("a takes a lease: counter, lease, excess = %v, want %v", got, want)
	}
	if got, want := call(b, 0, 50), [3]int64{75, 25, 0}; got != want {
		t.Fatalf("b takes half of the 50 left: %v, want %v", got, want)
	}
	time.Sleep(ttl / 2)
	if got, want := call(b, 0, 25), [3]int64{75, 25, 0}; got != want {
		t.Fatalf("b renews before a's lease expires: %v, want %v", got, want)
	}
	time.Sleep(ttl/2 + 50*time.Millisecond) // a's lease expired, b's not
	// a's 50 went back (75 − 50), b's 10 came out of its lease of 25,
	// and b's lease is half of the 90 left to it.
	if got, want := call(b, 10, 100), [3]int64{55, 45, 0}; got != want {
		t.Fatalf("b after a's lease expired: %v, want %v", got, want)
	}
	if n := rdb.HLen(ctx, a.leaseKey(&req, num)).Val(); n != 1 {
		t.Errorf("after a's lease expired the lease hash has %d fields, want 1 (b's)", n)
	}
	// a comes back and reports 60 hits (its 50 spent before its lease
	// expired, 10 blind): counted on top, its lease gone; 15 past the limit.
	if got, want := call(a, 60, 0), [3]int64{115, 0, 15}; got != want {
		t.Errorf("a reports 60 late: %v, want %v", got, want)
	}
}
