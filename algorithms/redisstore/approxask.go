package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
)

// The ask: a replica whose lease of a window is spent asks Redis at once
// for more — one call of approx.lua for that window, which reports what
// it admitted and takes a new lease — rather than refuse what Redis would
// admit. The callers of one window share the call: a window has one call
// in flight at a time (an ask's or a sync's), and a caller that finds one
// waits for its answer and decides again.

// maxAsks bounds the asks of one request. A request asks again when the
// lease an answer brought was spent by the other callers before its turn
// and Redis had more left: near the limit, where a lease is what is left
// divided among the replicas, callers of a busy replica may need a few
// rounds (each round admits some of them).
const maxAsks = 16

// approxAskCounters counts the asks by result.
type approxAskCounters struct {
	granted, exhausted, failed prometheus.Counter
}

// approxDecide decides r (approximate, valid) into d from the table,
// asking Redis when the lease is spent. It answers decided, or byPolicy
// when Redis gave no answer in time to a request past this replica's lease
// (the failure policy decides it), or notHere when r must be decided
// exactly: the table is full (throttle_approximate_overflow_total), or the
// registry has not been read (a replica decides approximately only once it
// knows how many replicas share a limit).
func (s *Store) approxDecide(ctx context.Context, r *algorithms.Request, d *algorithms.Decision, local time.Time, nowUS int64) verdict {
	t := s.approx
	if t.replicas.Load() == 0 {
		return notHere
	}
	h, st := t.hash(r)
	st.mu.Lock()
	at := decision{first: true, mayAsk: true}
	for asks := 0; ; asks++ {
		e := t.entryAt(st, h, r, nowUS, local.UnixNano())
		if e == nil {
			st.mu.Unlock()
			s.approxMetrics.overflow.Inc()
			return notHere
		}
		w := &e.cur
		at.nowUS, at.mono = nowUS, t.monoNow(local)
		at.first, at.mayAsk = asks == 0, asks < maxAsks
		v := t.decideIn(e, r, d, at)
		if v == mustAsk && r.Hits > 1 && r.Hits > t.share(e, w, at) {
			// Past this replica's share: Redis decides it exactly. (One hit
			// asks whatever the share: the ask's answer is what Redis has
			// left, and it is counted once however late it lands.)
			v = notHere
		}
		if v != mustAsk {
			t.queueDue(st, e)
			st.mu.Unlock()
			return v
		}
		f, lead := w.flight, w.flight == nil
		var op approxOp
		if lead {
			op = s.syncer.take(e, w, nowUS, local.UnixNano(), r.Hits)
			f = w.flight
		}
		st.mu.Unlock()
		if lead {
			s.syncer.ask(ctx, &op)
		} else {
			select {
			case <-f.done:
			case <-ctx.Done():
				at.offline = true // the caller cannot wait: the failure policy's
			}
		}
		local, nowUS = t.nowUS()
		st.mu.Lock()
	}
}

// share is the most a lease of w, a window of e, can be (approx.lua): what
// is left as the last answer said, with this replica's own lease, divided
// among the replicas. A request of more hits than that is not asked of
// the leases: one large request never takes the others' share.
func (t *approxTable) share(e *approxEntry, w *approxWindow, at decision) int64 {
	left := max(0, e.left(w, at.nowUS)+w.lease(at.mono))
	return (left + t.shares() - 1) / t.shares()
}

// ask runs op, one window's call, on its master within the caller's
// deadline (less the margin to answer by), and notes the answer; when
// none comes, the window is decided from memory until the next answer.
// An ask does not mark its master failing: only the syncer does.
func (y *approxSyncer) ask(ctx context.Context, op *approxOp) {
	ctx, cancel := askContext(ctx, y.callTimeout())
	defer cancel()
	ops := []approxOp{*op}
	var err error
	sh := y.s.route.masterOfRequest(&op.e.req)
	switch {
	case sh == nil || sh.client == nil:
		err = errNoMaster
	case sh.approxDown(time.Now(), y.callTimeout()):
		// Its syncs have failed for a whole call timeout (not one round a
		// starved CPU made late): an ask would wait as long for nothing.
		err = fmt.Errorf("its syncs fail: %w", errNoMaster)
	default:
		sent := time.Now()
		var res []int64
		res, err = y.call(ctx, sh, ops, []int{0})
		if err == nil {
			err = y.note(ops, []int{0}, res, sent, time.Now())
		}
		if err == nil {
			got := time.Now()
			sh.answered.Store(got.UnixNano())
			y.t.noteRoundTrip(got.Sub(sent))
		}
	}
	y.apply(ops, true)
	if c := y.t.asks; c != nil {
		switch {
		case err != nil:
			c.failed.Inc()
		case ops[0].held >= op.need:
			c.granted.Inc()
		default:
			c.exhausted.Inc()
		}
	}
}

// askContext bounds an ask by bound and by the caller's deadline less the
// margin the caller needs to answer (Guard.budget's).
func askContext(ctx context.Context, bound time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		bound = min(bound, left-DeadlineMargin(left))
	}
	return context.WithTimeout(ctx, bound)
}
