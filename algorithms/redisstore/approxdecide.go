package redisstore

import "github.com/throttle-rl/throttle/algorithms"

// The decision of an approximate request from memory: within this
// replica's lease, or within the blind budget of a window no answer
// covers, or else Redis must be asked (approxask.go).

// verdict is what decideIn concluded.
type verdict int8

const (
	decided  verdict = iota // the decision is made
	mustAsk                 // the lease is spent: ask Redis, then decide again
	byPolicy                // the lease is spent and Redis gave no answer in time: the failure policy decides
	notHere                 // the table cannot decide it: Redis decides exactly
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

// decision is when and how decideIn decides: nowUS on Redis's clock,
// mono on the table's monotonic one (the lease's expiry); first, the
// request's first pass (its hits count in the demand the lease follows);
// mayAsk, Redis may be asked (the caller has not asked too often);
// offline, Redis cannot be asked now (the caller cannot wait).
type decision struct {
	nowUS, mono            int64
	first, mayAsk, offline bool
}

// decideIn decides r on e's current window into d. The algorithm's rule
// decides on the count this replica knows (the others' leases counted as
// spent); hits are admitted while this replica's unexpired lease covers
// them, or past it within the blind budget while no answer has covered
// the window yet; past those, mustAsk; when the last answer left nothing to grant
// or the request asked often enough, refused until the next answer (Redis
// said so); when Redis could not be asked or gave no answer in time,
// byPolicy: the failure policy decides, never a refusal nobody made.
// st.mu is held.
func (t *approxTable) decideIn(e *approxEntry, r *algorithms.Request, d *algorithms.Decision, at decision) verdict {
	w := &e.cur
	f := algorithms.Found{Count: w.view(), Prev: e.prevView()}
	algorithms.Decide(r, &f, at.nowUS, d)
	if r.Hits == 0 || r.Hits > r.Limit.Limit {
		// A read, or never within the limit: as the count this replica
		// knows says (counted all the same when AlwaysCount).
		if d.Counted {
			w.pending += r.Hits
		}
		return decided
	}
	if at.first {
		e.demand += r.Hits
	}
	unsent, held, counted := w.unsent(), w.lease(at.mono), false
	switch {
	case unsent+r.Hits <= held:
		// Within the lease: Redis counted these hits when it granted it.
		counted = true
		if !d.Allowed { // (the previous window's weight as read after the grant)
			d.Allowed, d.RetryAfter = true, 0
			d.Remaining = max(0, held-unsent-r.Hits)
		}
	case d.Allowed && unsent+r.Hits <= held+t.extra(w, r.Limit.Limit, at.offline):
		counted = true // blind
		t.blindHits.Add(r.Hits)
	case d.Allowed && (at.offline || w.askFailed):
		// Within the limit as far as this replica knows, past its lease,
		// and Redis gave no answer in time: not a refusal Redis made.
		return byPolicy
	case at.mayAsk && !at.offline && !w.askFailed && !w.exhausted:
		return mustAsk
	case d.Allowed:
		// Within the limit as far as this replica knows, but Redis has
		// nothing left to grant (others hold it), or was asked often
		// enough: refused until the next answer.
		d.Allowed, d.Counted = false, false
		d.Remaining = max(0, held-unsent)
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
