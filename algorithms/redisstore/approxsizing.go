package redisstore

import (
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// How long and how much, for approximate limits: the round trip the
// syncs measure, the call timeout, the lease TTL and the horizon a lease
// covers, the shares a limit is divided in, and the blind budget of a
// window no answer has covered yet (docs/algorithms.md, docs/global-limits.md).

// callTimeout bounds one round of syncs, and an ask: two intervals, four
// round trips to Redis (a global Redis a region away), at least 500 ms.
func (t *approxTable) callTimeout() time.Duration {
	d := max(2*t.interval, 4*t.roundTrip(), 500*time.Millisecond)
	if t.rtt.Load() == 0 {
		d = max(d, t.firstTimeout)
	}
	return d
}

// horizon is how long a lease must last at this replica's demand: until
// the next sync's answer brings the next one — an interval and a round
// trip —, twice over, so a burst or a late answer does not leave the
// replica asking. On a Redis beside the replica the round trip is nothing;
// on a global Redis a region away (GLOBAL_REDIS_URL) it sizes the leases
// for the distance.
func (t *approxTable) horizon() time.Duration {
	return 2 * (t.interval + t.roundTrip())
}

// roundTrip is the round trip to Redis the syncs measure: a moving
// average of their calls' times (0 before the first answer).
func (t *approxTable) roundTrip() time.Duration { return time.Duration(t.rtt.Load()) }

// noteRoundTrip adds one answered call's time to the average: an eighth
// of it, or all of it for the first.
func (t *approxTable) noteRoundTrip(d time.Duration) {
	for {
		old := t.rtt.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if t.rtt.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

// leaseTTL is how long a lease of a window of l lasts unless renewed:
// long enough that a sync that takes its whole timeout still renews it in
// time (a call timeout and an interval, at least four intervals), never
// longer than the window. Redis gives back a lease not renewed within it
// (approx.lua), so a dead replica costs the others at most one TTL; the
// replica stops spending it a TTL after it sent the call that granted it,
// on its own monotonic clock, so it never spends what Redis gave back.
func (t *approxTable) leaseTTL(l *algorithms.Limit) time.Duration {
	return min(max(4*t.interval, t.callTimeout()+t.interval), l.Window)
}

// n is the replica count the blind budgets divide by.
func (t *approxTable) n() int64 { return max(1, t.replicas.Load()) }

// shares is how many shares a lease is capped to one of: the replica
// count, one more until it has settled (replicas that started together
// may not all have joined the registry yet: none takes more than half).
func (t *approxTable) shares() int64 {
	if !t.settled.Load() {
		return t.n() + 1
	}
	return t.n()
}

// blind is a window's budget before an answer has covered it: limit /
// (blindParts × replicas), rounded down; 0 until the replica count has
// settled.
func (t *approxTable) blind(limit int64) int64 {
	if !t.settled.Load() {
		return 0
	}
	return limit / (blindParts * t.n())
}

// extra is what w may admit past its lease: its blind budget while no
// answer has covered it yet (a new key) and Redis can be asked; else
// nothing — once an ask of the window got no answer, or the caller cannot
// wait for one, what is past the lease is the failure policy's.
func (t *approxTable) extra(w *approxWindow, limit int64, offline bool) int64 {
	if w.syncedAt == 0 && !offline && !w.askFailed {
		return t.blind(limit)
	}
	return 0
}
