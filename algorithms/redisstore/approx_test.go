package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// offerUneven sends rate requests a second at key through the stores,
// split by weights, from start until end (local time), and returns how
// many each window (by its start, Unix µs) admitted.
func offerUneven(t *testing.T, stores []algorithms.Store, weights []int, req algorithms.Request, rate int, start, end time.Time) map[int64]int64 {
	t.Helper()
	total := 0
	for _, w := range weights {
		total += w
	}
	var mu sync.Mutex
	admitted := map[int64]int64{}
	var wg sync.WaitGroup
	var failed atomic.Value
	time.Sleep(time.Until(start))
	for i, s := range stores {
		wg.Add(1)
		go func(s algorithms.Store, perSecond float64) {
			defer wg.Done()
			const tick = 5 * time.Millisecond
			owed := 0.0
			for next := time.Now(); next.Before(end); next = next.Add(tick) {
				time.Sleep(time.Until(next))
				owed += perSecond * tick.Seconds()
				for ; owed >= 1; owed-- {
					ds, err := s.Check(context.Background(), []algorithms.Request{req})
					if err != nil {
						failed.Store(err)
						return
					}
					if ds[0].Allowed {
						w := ds[0].ResetAt().Add(-req.Limit.Window).UnixMicro()
						mu.Lock()
						admitted[w]++
						mu.Unlock()
					}
				}
			}
		}(s, float64(rate)*float64(weights[i])/float64(total))
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatal(err)
	}
	return admitted
}

// TestApproximateKeepsTheLimit: replicas of uneven traffic (1 : 3 : 5) on
// one approximate limit admit within 2 % of it in a window, offered six
// times the limit; one replica alone too; on a single Redis and a Cluster.
// Every admitted hit reaches Redis.
func TestApproximateKeepsTheLimit(t *testing.T) {
	const limit, window = 2000, 6 * time.Second
	single, cluster := singleRedis, newClusterClient
	cases := []struct {
		name    string
		weights []int
		alg     algorithms.Algorithm
		client  func(t *testing.T) redis.UniversalClient
	}{
		{"3 replicas 1:3:5", []int{1, 3, 5}, algorithms.FixedWindow, single},
		{"1 replica", []int{1}, algorithms.FixedWindow, single},
		{"3 replicas on a cluster", []int{1, 3, 5}, algorithms.FixedWindow, cluster},
		{"3 replicas sliding", []int{1, 3, 5}, algorithms.SlidingWindow, single},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.client(t)
			var stores []algorithms.Store
			var rs []*Store
			for range tc.weights {
				s := New(rdb, Options{ApproximateInterval: 10 * time.Millisecond})
				t.Cleanup(s.Close)
				stores, rs = append(stores, s), append(rs, s)
			}
			req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "hot"}, Hits: 1, Unindexed: true,
				Limit: algorithms.Limit{Algorithm: tc.alg, Limit: limit, Window: window, Accuracy: algorithms.Approximate}}
			// One window to warm up (a sliding window's previous one),
			// then the window measured.
			start := time.Now().Truncate(window).Add(window)
			// The offer ends half a second before the window, so that its
			// counter is still in Redis to be read.
			got := offerUneven(t, stores, tc.weights, req, 6*limit/int(window/time.Second), start, start.Add(2*window-500*time.Millisecond))
			for _, s := range rs {
				if err := s.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			measured := got[start.Add(window).UnixMicro()]
			used := float64(measured)
			if tc.alg == algorithms.SlidingWindow {
				// The sliding count where the offer ended: the previous
				// window weighs its 0.5 s still to slide out.
				used += float64(got[start.UnixMicro()]) * 0.5 / window.Seconds()
			}
			t.Logf("admitted per window: %v; measured %.0f of %d (%+.2f %%)", got, used, limit, (used-limit)*100/limit)
			if used < limit*0.98 || used > limit*1.02 {
				t.Errorf("%.0f in the window, want within 2 %% of %d", used, limit)
			}
			c, err := redisCount(rdb, rs[0], &req, start.Add(window).UnixMicro())
			if err != nil {
				t.Fatal(err)
			}
			if c != measured {
				t.Errorf("Redis counts %d in the window, the replicas admitted %d", c, measured)
			}
		})
	}
}

// redisCount reads the counter of req's window that starts at startUS.
func redisCount(rdb redis.UniversalClient, s *Store, req *algorithms.Request, startUS int64) (int64, error) {
	v, err := rdb.Get(context.Background(), s.windowKey(req, startUS)).Result()
	if err != nil {
		return 0, fmt.Errorf("window %d: %w", startUS, err)
	}
	return strconv.ParseInt(v, 10, 64)
}

// TestApproximateReset: an approximate limit of a REST rule (indexed) is in
// its identifier's index once synced, so Reset deletes it in Redis (its
// counter and its leases) and in the table; Clear too. The hits counted
// after either are all Redis counts once drained.
func TestApproximateReset(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{ApproximateInterval: 10 * time.Millisecond})
	defer s.Close()
	req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u", Name: "rule"}, Hits: 1,
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 640, Window: time.Hour, Accuracy: algorithms.Approximate}}
	check := func(hits int64) algorithms.Decision {
		t.Helper()
		r := req
		r.Hits = hits
		ds, err := s.Check(ctx, []algorithms.Request{r})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	waitSettled(t, s)
	num := time.Now().UnixMicro() / time.Hour.Microseconds()
	keys := []string{s.windowKey(&req, num*time.Hour.Microseconds()), s.leaseKey(&req, num)}
	for range 8 { // past the blind budget (640 / 128 = 5): a lease
		check(1)
	}
	if n := rdb.Exists(ctx, keys...).Val(); n != 2 {
		t.Fatalf("after 8 hits, %d of the counter and the lease hash exist, want 2", n)
	}
	n, err := s.Reset(ctx, req.Key.Scope, req.Key.Identifier, "")
	if err != nil || n != 1 {
		t.Fatalf("Reset = %d, %v; want 1 limit reset", n, err)
	}
	if n := rdb.Exists(ctx, keys...).Val(); n != 0 {
		t.Errorf("after Reset, %d of the counter and the lease hash exist, want 0", n)
	}
	if d := check(0); d.Remaining != 640 {
		t.Errorf("after Reset: remaining %d, want 640 (nothing counted)", d.Remaining)
	}
	for range 8 {
		check(1)
	}
	if n, err := s.Clear(ctx, []algorithms.Request{req}); err != nil || n != 1 {
		t.Fatalf("Clear = %d, %v; want 1", n, err)
	}
	if n := rdb.Exists(ctx, keys...).Val(); n != 0 {
		t.Errorf("after Clear, %d of the counter and the lease hash exist, want 0", n)
	}
	if d := check(0); d.Remaining != 640 {
		t.Errorf("after Clear: remaining %d, want 640", d.Remaining)
	}
	for range 3 {
		check(1)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := redisCount(rdb, s, &req, num*time.Hour.Microseconds()); err != nil || c != 3 {
		t.Errorf("drained after Clear and 3 hits: Redis counts %d (%v), want 3", c, err)
	}
}

// waitSettled waits until s's replica count has settled (its blind
// budgets are on), deciding an approximate request to start its syncer.
func waitSettled(t *testing.T, s *Store) {
	t.Helper()
	r := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "settle"}, Unindexed: true,
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour, Accuracy: algorithms.Approximate}}
	if _, err := s.Check(context.Background(), []algorithms.Request{r}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !s.approx.settled.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica count has not settled in 10 s")
		}
	}
}

// decideLocal decides r from tb alone, as a replica that cannot ask
// Redis, and queues its entry when due.
func decideLocal(tb *approxTable, r *algorithms.Request, d *algorithms.Decision) {
	local, nowUS := tb.nowUS()
	h, st := tb.hash(r)
	st.mu.Lock()
	defer st.mu.Unlock()
	e := tb.entryAt(st, h, r, nowUS, local.UnixNano())
	tb.decideIn(e, r, d, decision{nowUS: nowUS, mono: tb.monoNow(local), first: true})
	tb.queueDue(st, e)
}

// TestApproximateQueuesWhatBecomesDue: a window whose pending hits were not
// due when counted (half the blind budget of one replica) becomes due when
// the registry says there are three (a smaller blind budget): the next
// decision, even a refused one, queues it for the sync, and so does a
// sweep without any decision.
func TestApproximateQueuesWhatBecomesDue(t *testing.T) {
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 3840, Window: time.Hour, Accuracy: algorithms.Approximate}
	for _, via := range []string{"decision", "sweep"} {
		t.Run(via, func(t *testing.T) {
			tb := newApproxTable(time.Second, 1024, nil)
			tb.replicas.Store(1) // blind budget 3840 / 128 = 30: due at 15 pending
			tb.settled.Store(true)
			r := algorithms.Request{Key: algorithms.Key{Scope: "s", Identifier: "u"}, Limit: l, Hits: 1}
			var d algorithms.Decision
			for range 12 {
				decideLocal(tb, &r, &d)
			}
			_, st := tb.hash(&r)
			if len(st.queue) != 0 {
				t.Fatalf("12 pending of a blind budget of 30: queued %d, want 0", len(st.queue))
			}
			tb.replicas.Store(3) // blind budget 10: 12 pending is past half of it
			if via == "decision" {
				decideLocal(tb, &r, &d)
				if d.Allowed {
					t.Errorf("13 unsent hits of a blind budget of 10 admitted: %+v", d)
				}
			} else {
				_, nowUS := tb.nowUS()
				st.sweep(tb, nowUS)
			}
			if len(st.queue) != 1 {
				t.Errorf("after the %s: queued %d, want 1", via, len(st.queue))
			}
		})
	}
}

// TestApproximateOwedHitsGivenUp: hits a window owed Redis (half its blind
// budget) and could not send are counted as given up, whether the window
// is rolled away by the next ones' decisions or swept once over; hits it
// did not owe (a key far below its limit) lapse uncounted either way.
func TestApproximateOwedHitsGivenUp(t *testing.T) {
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 3840, Window: time.Second, Accuracy: algorithms.Approximate}
	for _, hits := range []int64{12, 20} { // blind budget 30: owed from 15
		want := int64(0)
		if 2*hits >= 30 {
			want = hits
		}
		for _, via := range []string{"roll", "sweep"} {
			t.Run(fmt.Sprintf("%d/%s", hits, via), func(t *testing.T) {
				clock := storetest.NewClock(t0)
				tb := newApproxTable(time.Second, 1024, clock.Now)
				tb.replicas.Store(1)
				tb.settled.Store(true)
				r := algorithms.Request{Key: algorithms.Key{Scope: "s", Identifier: "u"}, Limit: l, Hits: 1}
				var d algorithms.Decision
				for range hits {
					decideLocal(tb, &r, &d)
				}
				if via == "roll" {
					for range 2 { // the window after, then the one after that
						clock.Advance(time.Second)
						decideLocal(tb, &r, &d)
					}
				} else {
					clock.Advance(time.Second)
					_, nowUS := tb.nowUS()
					_, st := tb.hash(&r)
					st.mu.Lock()
					st.sweep(tb, nowUS)
					st.mu.Unlock()
				}
				if got := tb.dropped.Load(); got != want {
					t.Errorf("%d unsent hits of a window that is gone: %d given up, want %d", hits, got, want)
				}
			})
		}
	}
}

// TestApproximateClusterMasterDown: on a Cluster with one master stopped,
// the approximate limits of that master's keys are decided by the failure
// policy once its syncs have failed for HungAfter, while the keys of the
// other masters go on being decided from the table (and synced).
func TestApproximateClusterMasterDown(t *testing.T) {
	masters := redistest.StartClusterServers(t)
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr())
	}
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialerRetries: 1, DialTimeout: 200 * time.Millisecond, MaxRedirects: 1})
	t.Cleanup(func() { cc.Close() })
	st := New(cc, Options{ApproximateInterval: 20 * time.Millisecond})
	t.Cleanup(st.Close)
	g, err := NewGuard(st, GuardOptions{Mode: algorithms.FailClosed, HungAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	scope := uniqueScope(t)
	st.route.ready(ctx)
	var onDead, onLive string
	for i := 0; onDead == "" || onLive == ""; i++ {
		id := fmt.Sprintf("user-%d", i)
		if st.route.masterOf(st.indexKey(scope, id)).name == masters[0].Addr() {
			onDead = id
		} else {
			onLive = id
		}
	}
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 6400, Window: time.Hour, Accuracy: algorithms.Approximate}
	check := func(id string) algorithms.Decision {
		t.Helper()
		ds, err := g.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: id}, Limit: limit, Hits: 1, Unindexed: true}})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	for range 60 { // past half the blind budget (6400 / 64 / 2 = 50): synced
		check(onDead)
		check(onLive)
	}
	masters[0].Stop()
	deadline := time.Now().Add(5 * time.Second)
	for d := check(onDead); !d.Degraded; d = check(onDead) {
		if !d.Allowed {
			t.Fatalf("a key of the stopped master refused, not by the policy: %+v", d)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stopped master's approximate key still decided from the table after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := check(onDead); !d.Degraded || d.Allowed {
		t.Errorf("the stopped master's key under FAILURE_MODE=closed: %+v, want degraded and refused", d)
	}
	if d := check(onLive); d.Degraded || !d.Allowed {
		t.Errorf("a live master's key: %+v, want decided from the table, allowed", d)
	}
}
