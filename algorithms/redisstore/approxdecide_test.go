package redisstore

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestApproximateDecideIn: what a replica decides from memory on one
// window of a limit of 1,280 with 2 replicas (blind budget 5), by what it
// holds: within its lease, admitted; past it, blind while no answer covers
// the window yet, else it must ask, unless the last
// answer left nothing (refused: the limit is spent as far as it knows);
// past its lease and blind budget when its ask failed, or when the caller
// cannot wait, the failure policy's (never a refusal Redis did not make);
// a lease past its expiry is spent no more (it must ask); a request of
// more hits than the limit never asks.
func TestApproximateDecideIn(t *testing.T) {
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1280, Window: time.Hour, Accuracy: algorithms.Approximate}
	cases := []struct {
		name    string
		window  approxWindow // of the current window number
		offline bool
		hits    int64
		want    verdict
		allowed bool
	}{
		{"never answered, within the blind budget", approxWindow{pending: 4}, false, 1, decided, true},
		{"never answered, past the blind budget", approxWindow{pending: 5}, false, 1, mustAsk, false},
		{"within the lease", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 9}, false, 1, decided, true},
		{"past the lease", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 10}, false, 1, mustAsk, false},
		{"past the lease, nothing left", approxWindow{syncedAt: 1, global: 1280, held: 10, pending: 10, exhausted: true}, false, 1, decided, false},
		{"past the lease, its ask failed: the failure policy's at once", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 10, askFailed: true}, false, 1, byPolicy, false},
		{"never answered, past the blind budget, its ask failed", approxWindow{pending: 5, askFailed: true}, false, 1, byPolicy, false},
		{"never answered, within the blind budget, its ask failed", approxWindow{pending: 4, askFailed: true}, false, 1, byPolicy, false},
		{"past the lease and the blind budget, its ask failed", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 15, askFailed: true}, false, 1, byPolicy, false},
		{"past the lease and the blind budget, the caller cannot wait", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 15}, true, 1, byPolicy, false},
		{"past the lease, over the limit as far as it knows, its ask failed", approxWindow{syncedAt: 1, global: 1280, held: 10, pending: 15, askFailed: true}, false, 1, decided, false},
		{"within a lease that expired", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 5, leaseUntil: -1}, false, 1, mustAsk, false},
		{"more than the limit", approxWindow{syncedAt: 1}, false, 1281, decided, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := newApproxTable(100*time.Millisecond, 1024, nil)
			tb.replicas.Store(2)
			tb.settled.Store(true)
			r := algorithms.Request{Key: algorithms.Key{Scope: "s", Identifier: "u"}, Limit: l, Hits: tc.hits}
			local, nowUS := tb.nowUS()
			h, st := tb.hash(&r)
			st.mu.Lock()
			defer st.mu.Unlock()
			e := tb.entryAt(st, h, &r, nowUS, local.UnixNano())
			w := tc.window
			w.num, w.prevCount = e.cur.num, -1
			var d algorithms.Decision
			if w.leaseUntil == 0 {
				w.leaseUntil = 1 << 62 // unexpired
			}
			e.cur = w
			got := tb.decideIn(e, &r, &d, decision{nowUS: nowUS, first: true, mayAsk: true, offline: tc.offline})
			if got != tc.want || (got == decided && d.Allowed != tc.allowed) {
				t.Errorf("verdict %v, allowed %v; want %v, %v", got, d.Allowed, tc.want, tc.allowed)
			}
		})
	}
}

// TestApproximateLeaseForDistance: leases cover two intervals and two
// round trips of demand, and calls time out after four round trips, so a
// Redis a region away (a global one) is asked for larger leases, longer.
func TestApproximateLeaseForDistance(t *testing.T) {
	tb := newApproxTable(100*time.Millisecond, 1024, nil)
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1_000_000, Window: time.Hour, Accuracy: algorithms.Approximate}
	for _, c := range []struct {
		rtts                  []time.Duration // answered calls, in order
		rtt, horizon, timeout time.Duration
		ttl                   time.Duration
		target                int64 // at 1,000 hits a second
	}{
		{nil, 0, 200 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond, 200},
		{[]time.Duration{100 * time.Millisecond}, 100 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond, 400},
		// 100 ms, then 8 calls of 260 ms: the average moves an eighth a call.
		{[]time.Duration{260, 260, 260, 260, 260, 260, 260, 260}, 0, 0, 0, 0, 0},
	} {
		for _, d := range c.rtts {
			if d < time.Millisecond {
				d *= time.Millisecond
			}
			tb.noteRoundTrip(d)
		}
		if c.horizon == 0 { // the moving average: check its bounds only
			if rtt := tb.roundTrip(); rtt < 200*time.Millisecond || rtt > 260*time.Millisecond {
				t.Errorf("after 8 calls of 260 ms from 100 ms the round trip is %v, want between 200 and 260 ms", rtt)
			}
			if to := tb.callTimeout(); to != 4*tb.roundTrip() {
				t.Errorf("call timeout %v at a round trip of %v, want four round trips", to, tb.roundTrip())
			}
			if ttl := tb.leaseTTL(&l); ttl != 4*tb.roundTrip()+100*time.Millisecond {
				t.Errorf("lease TTL %v, want the call timeout and an interval", ttl)
			}
			continue
		}
		if tb.roundTrip() != c.rtt || tb.horizon() != c.horizon || tb.callTimeout() != c.timeout || tb.leaseTTL(&l) != c.ttl {
			t.Errorf("rtt %v: round trip, horizon, timeout, ttl = %v %v %v %v; want %v %v %v %v", c.rtt,
				tb.roundTrip(), tb.horizon(), tb.callTimeout(), tb.leaseTTL(&l), c.rtt, c.horizon, c.timeout, c.ttl)
		}
		e := &approxEntry{demand: 500, demandPrev: 500, sincePrev: 0}
		if got := e.target(int64(time.Second), tb.horizon().Nanoseconds()); got != c.target {
			t.Errorf("rtt %v: target at 1,000 hits a second = %d, want %d", c.rtt, got, c.target)
		}
	}
}
