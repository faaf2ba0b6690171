package redisstore

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestApproximateDecideIn: what a replica decides from memory on one
// window of a limit of 1,280 with 2 replicas (blind budget 5), by what it
// holds: within its lease, admitted; past it, blind while no answer covers
// the window (or its ask failed), else it must ask, unless the last
// answer left nothing (refused: the limit is spent as far as it knows);
// refused past its lease and blind budget when its ask failed, retry
// after the interval (the next answer); a request of more hits than the
// limit never asks.
func TestApproximateDecideIn(t *testing.T) {
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1280, Window: time.Hour, Accuracy: algorithms.Approximate}
	cases := []struct {
		name    string
		window  approxWindow // of the current window number
		hits    int64
		want    verdict
		allowed bool
	}{
		{"never answered, within the blind budget", approxWindow{pending: 4}, 1, decided, true},
		{"never answered, past the blind budget", approxWindow{pending: 5}, 1, mustAsk, false},
		{"within the lease", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 9}, 1, decided, true},
		{"past the lease", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 10}, 1, mustAsk, false},
		{"past the lease, nothing left", approxWindow{syncedAt: 1, global: 1280, held: 10, pending: 10, exhausted: true}, 1, decided, false},
		{"past the lease, its ask failed: blind", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 14, askFailed: true}, 1, decided, true},
		{"past the lease and the blind budget, its ask failed", approxWindow{syncedAt: 1, global: 100, held: 10, pending: 15, askFailed: true}, 1, decided, false},
		{"more than the limit", approxWindow{syncedAt: 1}, 1281, decided, false},
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
			e.cur = w
			var d algorithms.Decision
			got := tb.decideIn(e, &r, &d, nowUS, true, true, false)
			if got != tc.want || (got == decided && d.Allowed != tc.allowed) {
				t.Errorf("verdict %v, allowed %v; want %v, %v", got, d.Allowed, tc.want, tc.allowed)
			}
			if got == decided && !d.Allowed && tc.window.askFailed && d.RetryAfter != 100*time.Millisecond {
				t.Errorf("refused while Redis does not answer: retry after %v, want the interval", d.RetryAfter)
			}
		})
	}
}
