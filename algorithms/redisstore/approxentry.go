package redisstore

import (
	"math"

	"github.com/throttle-rl/throttle/algorithms"
)

// One approximate limit on one identifier: its windows, what they hold of
// the shared count, and this replica's lease of it.

// approxEntry is what a replica keeps of one approximate limit: its
// current window and, until it is sent, the one before.
type approxEntry struct {
	req       algorithms.Request // its Key and Limit: the Redis keys at sync
	cur, prev approxWindow
	next      *approxEntry // another entry of the same hash
	queued    bool         // in its stripe's queue
	dropped   bool         // out of the table: what it still queues is not sent
	// demand is the hits asked of this limit here since the current
	// window's last call (admitted or not), since when (local ns);
	// demandPrev and sincePrev, the gap before: a lease is about two
	// intervals of that rate, which carries over into the next window.
	demand, since, demandPrev, sincePrev int64
}

// is reports whether e is the entry of r.
func (e *approxEntry) is(r *algorithms.Request) bool {
	return e.req.Key == r.Key && e.req.Limit == r.Limit
}

// approxWindow is one window of an approximate limit. Redis holds its
// counter (what every replica admitted, plus every replica's lease not yet
// spent) and each replica's lease; this replica spends its lease here,
// and reports what it admitted at its next call (approx.lua).
type approxWindow struct {
	num      int64 // the window's number: its start / its length; 0 = none
	global   int64 // the counter as the last answer read it: admitted + every lease
	held     int64 // this replica's lease as of the last answer (its own admitted hits since are pending)
	pending  int64 // hits admitted here and not reported
	inflight int64 // hits the call in flight reports
	// reported is the running total of the hits sent in this window's
	// calls, less those of calls known lost: each call carries it, and
	// Redis counts only what it adds to the last it saw (approx.lua), so
	// a call that reached Redis with its answer lost is not counted twice.
	reported int64
	// back is the running total of the hits taken back after a call
	// carried them (takeBack), sent with each call as reported is;
	// backSent is back as of the last answer: the window is due while
	// back is more.
	back, backSent int64
	// prevCount is a sliding window's previous window's counter as an
	// answer read it; -1 until then.
	prevCount int64
	syncedAt  int64 // local Unix ns of the last answer; 0 = never
	// leaseUntil is when held stops being spendable, on the table's
	// monotonic clock (approxTable.mono): a lease TTL after the call that
	// granted it was sent.
	leaseUntil int64
	// exhausted: the last answer left nothing of the limit to grant; a
	// request past the lease is refused here until the next answer.
	exhausted bool
	// askFailed: an ask of this window got no answer; until an answer
	// comes the window is decided from memory (its lease and blind budget).
	askFailed bool
	flight    *approxFlight // the call to Redis in flight, nil when none
}

// approxFlight is a window's call to Redis in flight (a sync's or an
// ask's): a window has one at a time, so each answer follows the one
// before; callers that would ask wait for it.
type approxFlight struct{ done chan struct{} }

// lease is what w's lease holds at mono (the table's monotonic clock, ns):
// held until it expires, then nothing — Redis may have given it back.
func (w *approxWindow) lease(mono int64) int64 {
	if mono >= w.leaseUntil {
		return 0
	}
	return w.held
}

// unsent is what this replica admitted in w and has not had answered.
func (w *approxWindow) unsent() int64 { return w.pending + w.inflight }

// view is w's count as this replica knows it: the last counter read, less
// this replica's lease, plus what it admitted since (the others' leases
// count as spent).
func (w *approxWindow) view() int64 { return max(0, w.global-w.held) + w.unsent() }

// uncovered is what w admitted that no lease Redis knows of covers (blind
// hits): what is lost when they cannot be sent.
func (w *approxWindow) uncovered() int64 { return max(0, w.unsent()-w.held) }

// target is the lease to ask for at localNS: the demand of the last two
// gaps between the current window's calls (at least a millisecond of it)
// over horizonNS (approxTable.horizon). It starts a new gap.
func (e *approxEntry) target(localNS, horizonNS int64) int64 {
	elapsed := max(localNS-e.sincePrev, 1e6)
	t := int64(math.Ceil(float64(e.demand+e.demandPrev) * float64(horizonNS) / float64(elapsed)))
	e.demandPrev, e.sincePrev = e.demand, e.since
	e.demand, e.since = 0, localNS
	return t
}

// roll makes window num the current one at localNS: the one before
// becomes prev (kept until its hits and lease are sent); an older one's
// unsent hits are given up. It returns the hits given up that it owed
// (those no lease covers).
func (e *approxEntry) roll(t *approxTable, num, localNS int64) (dropped int64) {
	if e.cur.num == num {
		return 0
	}
	if e.cur.num > num {
		return 0 // a clock step back: stay in the window we have
	}
	if t.owes(e, &e.prev) {
		dropped = e.prev.uncovered()
	}
	if e.cur.num == 0 { // a new entry: its demand starts now
		e.since, e.sincePrev = localNS, localNS
	}
	e.prev = e.cur
	e.cur = approxWindow{num: num, prevCount: -1}
	if e.prev.num != num-1 {
		// Not the window before: its hits still go to Redis, but it
		// weighs nothing on this one.
		e.cur.prevCount = 0
	}
	return dropped
}

// prevView is a sliding window's previous count as this replica knows it:
// what an answer read, or at least its own view of that window.
func (e *approxEntry) prevView() int64 {
	if e.prev.num != e.cur.num-1 {
		return max(0, e.cur.prevCount)
	}
	return max(e.cur.prevCount, e.prev.view())
}

// over reports whether e's windows are over at nowUS (a sliding window
// weighs on the next one) with nothing left to send (a lease of a window
// that is over lapses with its counter).
func (e *approxEntry) over(nowUS int64) bool {
	return e.end(&e.cur) <= nowUS && e.cur.unsent()+e.prev.unsent() == 0 &&
		e.cur.flight == nil && e.prev.flight == nil
}

// end is when w's counter expires, in µs: the window's end (a sliding
// window's, the next one's).
func (e *approxEntry) end(w *approxWindow) int64 {
	wUS := e.req.Limit.Window.Microseconds()
	end := (w.num + 1) * wUS
	if e.req.Limit.Algorithm == algorithms.SlidingWindow {
		end += wUS
	}
	return end
}

// dropExpired forgets the unsent hits and the lease of e's windows whose
// counters would have expired by nowUS, and counts the hits it owed that
// no lease covered as given up. st.mu is held.
func (e *approxEntry) dropExpired(t *approxTable, nowUS int64) {
	for _, w := range []*approxWindow{&e.prev, &e.cur} {
		if w.num == 0 || w.flight != nil || e.end(w) > nowUS {
			continue
		}
		if t.owes(e, w) {
			t.dropped.Add(w.uncovered())
		}
		w.pending, w.held = 0, 0
	}
}

// owes reports whether Redis must be told of w's pending hits: w has had
// an answer (they spend a lease, or are over it), or half its blind budget
// is pending. A window that owes nothing is not sent for its hits: a key
// far below its limit costs Redis nothing, and its hits lapse with it
// uncounted. This is the one rule of what a window owes; due, roll and
// dropExpired read it.
func (t *approxTable) owes(e *approxEntry, w *approxWindow) bool {
	return w.pending > 0 && (w.syncedAt != 0 || 2*w.pending >= t.blind(e.req.Limit.Limit))
}

// due reports whether w is sent in this round: no call of it is in
// flight, and it owes its hits, or holds a lease (to resize, or to give
// back), or has pending hits and is the previous window or this is the
// last flush; or requests it refused since its last answer want a lease.
func (t *approxTable) due(w *approxWindow, e *approxEntry, final bool) bool {
	if w.num == 0 || w.flight != nil {
		return false
	}
	switch {
	case w.held > 0 || t.owes(e, w) || w.back > w.backSent:
		return true
	case w.pending > 0:
		return final || w == &e.prev
	default:
		return !final && w == &e.cur && w.syncedAt != 0 && e.demand > 0
	}
}

// window returns e's window num, or nil.
func (e *approxEntry) window(num int64) *approxWindow {
	switch num {
	case e.cur.num:
		return &e.cur
	case e.prev.num:
		return &e.prev
	}
	return nil
}

// left is what is left of the limit in w at nowUS (µs), neither admitted
// nor leased, as the last answer says: the limit less the window's
// counter and, for a sliding window, the previous window's weight.
func (e *approxEntry) left(w *approxWindow, nowUS int64) int64 {
	l := &e.req.Limit
	left := l.Limit - w.global
	if l.Algorithm == algorithms.SlidingWindow && w == &e.cur {
		wUS := l.Window.Microseconds()
		elapsed := min(max(nowUS-w.num*wUS, 0), wUS)
		weight := float64(e.prevView()) * float64(wUS-elapsed) / float64(wUS)
		left -= int64(math.Ceil(weight))
	}
	return left
}
