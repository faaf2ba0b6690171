package redisstore

import (
	"math"

	"github.com/throttle-rl/throttle/algorithms"
)

// One approximate limit on one identifier: its windows, and what they
// hold of the shared count.

// approxEntry is what a replica keeps of one approximate limit: its
// current window and, until it is sent, the one before.
type approxEntry struct {
	req       algorithms.Request // its Key and Limit: the Redis keys at sync
	cur, prev approxWindow
	next      *approxEntry // another entry of the same hash
	queued    bool         // in its shard's queue
}

// is reports whether e is the entry of r.
func (e *approxEntry) is(r *algorithms.Request) bool {
	return e.req.Key == r.Key && e.req.Limit == r.Limit
}

// approxWindow is one window of an approximate limit.
type approxWindow struct {
	num      int64 // the window's number: its start / its length; 0 = none
	global   int64 // the shared count the last sync read, own synced hits included
	pending  int64 // hits admitted here and not sent
	inflight int64 // hits a sync has sent and not heard back about
	// prevCount is a sliding window's previous window's shared count as
	// a sync read it; -1 until then.
	prevCount int64
	syncedAt  int64 // local Unix ns of the last sync's answer; 0 = never
	budget    int64 // the most that may be unsent (pending + inflight): set at sync
}

// roll makes window num the current one: the one before becomes prev
// (kept until its hits are sent); an older one's unsent hits are given up.
// It returns the hits given up.
func (e *approxEntry) roll(num int64) (dropped int64) {
	if e.cur.num == num {
		return 0
	}
	if e.cur.num > num {
		return 0 // a clock step back: stay in the window we have
	}
	if e.prev.syncedAt != 0 {
		dropped = e.prev.pending // (never synced: never due to be sent)
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
// what a sync read, or at least its own view of that window.
func (e *approxEntry) prevView() int64 {
	if e.prev.num != e.cur.num-1 {
		return max(0, e.cur.prevCount)
	}
	return max(e.cur.prevCount, e.prev.global+e.prev.pending+e.prev.inflight)
}

// over reports whether e's windows are over at nowUS (a sliding window
// weighs on the next one) with nothing left to send.
func (e *approxEntry) over(nowUS int64) bool {
	wUS := e.req.Limit.Window.Microseconds()
	end := (e.cur.num + 1) * wUS
	if e.req.Limit.Algorithm == algorithms.SlidingWindow {
		end += wUS
	}
	return end <= nowUS && e.cur.pending+e.cur.inflight+e.prev.pending+e.prev.inflight == 0
}

// dropExpired forgets the unsent hits of e's windows whose counters would
// have expired by nowUS (the window is over; a sliding window's, the next
// one too), and counts them as given up when they were due: a window below
// half its blind budget is never sent. sh.mu is held.
func (e *approxEntry) dropExpired(t *approxTable, nowUS int64) {
	wUS := e.req.Limit.Window.Microseconds()
	for _, w := range []*approxWindow{&e.prev, &e.cur} {
		end := (w.num + 1) * wUS
		if e.req.Limit.Algorithm == algorithms.SlidingWindow {
			end += wUS
		}
		if w.num != 0 && w.pending > 0 && end <= nowUS {
			if w.syncedAt != 0 || 2*w.pending >= t.blind(e.req.Limit.Limit) {
				t.dropped.Add(w.pending)
			}
			w.pending = 0
		}
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

// left is what is left of the limit in w at nowUS (µs), as the last sync
// says: the limit less the window's shared count and, for a sliding
// window, the previous window's weight.
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
