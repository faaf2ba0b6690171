package redisstore

import "github.com/throttle-rl/throttle/algorithms"

// The decision of an approximate request from memory: within this
// replica's lease, or within the blind budget of a window no answer
// covers, or else Redis must be asked (approxask.go).

// verdict is what decideIn concluded.
type verdict int8

const (
	decided verdict = iota // the decision is made
	mustAsk                // the lease is spent: ask Redis, then decide again
)

// entryAt returns r's entry (of hash h) in its current window at nowUS,
// made when missing; nil when the table is full. st.mu is held.
func (t *approxTable) entryAt(st *approxStripe, h uint64, r *algorithms.Request, nowUS, localNS int64) *approxEntry {
	e := st.find(h, r)
	if e == nil {
		if st.n >= t.maxKeys && !st.evict(nowUS) {
			return nil
		}
		e = &approxEntry{req: algorithms.Request{Key: r.Key, Limit: r.Limit, Unindexed: r.Unindexed}}
		st.add(h, e)
	}
	t.dropped.Add(e.roll(t, nowUS/r.Limit.Window.Microseconds(), localNS))
	return e
}

// decideIn decides r on e's current window into d. The algorithm's rule
// decides on the count this replica knows (the others' leases counted as
// spent); hits are admitted while this replica's lease covers them, or
// past it within the blind budget while no answer covers the window;
// past those, mustAsk, unless the last answer left nothing to grant, asks
// of the window fail, or mayAsk is false (the caller asked already, or
// cannot wait): then refused until the next answer. first says this is
// the request's first pass (its hits count in the demand the lease
// follows); offline, that Redis cannot be asked now. st.mu is held.
func (t *approxTable) decideIn(e *approxEntry, r *algorithms.Request, d *algorithms.Decision, nowUS int64, first, mayAsk, offline bool) verdict {
	w := &e.cur
	f := algorithms.Found{Count: w.view(), Prev: e.prevView()}
	algorithms.Decide(r, &f, nowUS, d)
	if r.Hits == 0 || r.Hits > r.Limit.Limit {
		// A read, or never within the limit: as the count this replica
		// knows says (counted all the same when AlwaysCount).
		if d.Counted {
			w.pending += r.Hits
		}
		return decided
	}
	if first {
		e.demand += r.Hits
	}
	unsent, counted := w.unsent(), false
	switch {
	case unsent+r.Hits <= w.held:
		// Within the lease: Redis counted these hits when it granted it.
		counted = true
		if !d.Allowed { // (the previous window's weight as read after the grant)
			d.Allowed, d.RetryAfter = true, 0
			d.Remaining = max(0, w.held-unsent-r.Hits)
		}
	case d.Allowed && unsent+r.Hits <= w.held+t.extra(w, r.Limit.Limit, offline):
		counted = true // blind
	case mayAsk && !offline && !w.exhausted && !w.askFailed:
		return mustAsk
	case d.Allowed:
		// Within the limit as far as this replica knows, but Redis has
		// nothing left to grant (others hold it), or cannot be asked:
		// refused until the next answer.
		d.Allowed, d.Counted = false, false
		d.Remaining = max(0, w.held-unsent)
		d.RetryAfter = min(t.interval, d.ResetAfter)
	}
	if counted || r.AlwaysCount {
		w.pending += r.Hits
		d.Counted = true
	}
	return decided
}

// queueDue queues e for the next sync when a window of it is due. st.mu
// is held.
func (t *approxTable) queueDue(st *approxStripe, e *approxEntry) {
	if t.due(&e.cur, e, false) || t.due(&e.prev, e, false) {
		st.enqueue(e)
	}
}
