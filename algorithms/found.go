package algorithms

import "fmt"

// Deciding on a backend's state. A counter backend (the Redis store) reads
// each request's state, counts its hits where they are within the limit,
// and returns what it found before it counted. DecideFound turns that into
// decisions with the same arithmetic the memory store applies to its own
// state (decide.go), so the two stores give identical decisions, and checks
// that the backend's within-or-over agrees with Go's.

// Found is what a backend found of one request before it counted its hits.
type Found struct {
	// Within says the backend found the hits within the limit (and so
	// counted them, unless an all-or-nothing group voids them).
	Within bool
	// Count is a fixed or sliding window's count in the current window
	// (the window that holds the decision's time); Prev, a sliding
	// window's count in the window before it.
	Count, Prev int64
	// Exists says a token bucket's or GCRA's state existed (otherwise the
	// bucket is full, the cell idle).
	Exists bool
	// Tokens is a token bucket's tokens at the moment At (µs).
	Tokens float64
	At     int64
	// TAT is a GCRA's theoretical arrival time: TAT + Rem/p µs, with p and
	// 0 ≤ Rem < p as gcra.lua counts them.
	TAT, Rem int64
}

// state converts f to decide.go's states of r's algorithm at nowUS.
func (f *Found) state(l *Limit, nowUS int64) (w windowState, tb *tokenState, cell *gcraState) {
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
		wUS := l.Window.Microseconds()
		w = windowState{start: nowUS - nowUS%wUS, count: f.Count, prev: f.Prev}
	case TokenBucket:
		if f.Exists {
			tb = &tokenState{tokens: f.Tokens, ts: f.At}
		}
	case GCRA:
		if f.Exists {
			cell = &gcraState{tat: f.TAT, rem: f.Rem}
		}
	}
	return w, tb, cell
}

// Within reports whether r's hits are within its limit on the state f at
// nowUS (µs), by r's algorithm: what a backend that counts first (a plain
// INCRBY) decides after the fact.
func Within(r *Request, f *Found, nowUS int64) bool {
	o := decideOn(r, f, nowUS, r.Hits)
	return o.allowed
}

// DecideFound turns what a backend found of each request (fs[i] of
// reqs[i], at its time nowUS in µs) into decisions. sizes are the lengths
// of the callers' batches that reqs joins, in order (nil: one caller): each
// caller's all-or-nothing requests (Tied) are void when one of them is over
// its limit. It fails when the backend's Within disagrees with Go's rule.
func DecideFound(reqs []Request, sizes []int, fs []Found, nowUS int64) ([]Decision, error) {
	out := make([]Decision, len(reqs))
	var err error
	Groups(len(reqs), sizes, func(_, from, to int) {
		voided := false
		if Tied(reqs[from:to]) {
			for i := from; i < to; i++ {
				voided = voided || (reqs[i].AllOrNothing && !fs[i].Within)
			}
		}
		for i := from; i < to; i++ {
			within := decideFound(&reqs[i], &fs[i], nowUS, voided, &out[i])
			if within != fs[i].Within && err == nil {
				err = fmt.Errorf("request %d: the backend found it within its limit: %v, Go: %v", i, fs[i].Within, within)
			}
		}
	})
	return out, err
}

// Decide writes to d the decision of r alone (no all-or-nothing group) on
// the state f a backend found at nowUS, and reports whether the hits were
// within the limit. Counted says whether they were counted.
func Decide(r *Request, f *Found, nowUS int64, d *Decision) bool {
	return decideFound(r, f, nowUS, false, d)
}

// decideFound writes to d the decision of r on the state f: counted unless
// its all-or-nothing group was voided (by a request over its limit). It
// returns whether the hits were within the limit.
func decideFound(r *Request, f *Found, nowUS int64, voided bool, d *Decision) bool {
	counted := !(voided && Uncounts(r))
	o := decideOn(r, f, nowUS, r.Hits)
	within := o.allowed
	if o.wrote && !counted {
		// Within its limit, but not counted: say what the state is.
		o = decideOn(r, f, nowUS, 0)
		o.allowed = true
	}
	o.writeTo(d, r.Limit.Limit, nowUS)
	d.Counted = o.wrote && counted
	return within
}

// decideOn applies r's algorithm, for hits, to the state f.
func decideOn(r *Request, f *Found, nowUS, hits int64) outcome {
	l := &r.Limit
	w, tb, cell := f.state(l, nowUS)
	var o outcome
	switch l.Algorithm {
	case FixedWindow:
		_, o = decideFixed(&w, nowUS, l.Window.Microseconds(), l.Limit, hits, r.AlwaysCount)
	case SlidingWindow:
		_, o = decideSliding(&w, nowUS, l.Window.Microseconds(), l.Limit, hits, r.AlwaysCount)
	case TokenBucket:
		_, o = decideToken(tb, nowUS, l.Limit, l.Refill(), hits, r.AlwaysCount)
	case GCRA:
		_, o = decideGCRA(cell, nowUS, l.Window.Microseconds(), l.Limit, hits, r.AlwaysCount)
	}
	return o
}

// Groups calls f(g, from, to) for each caller's part of a batch, g its
// number: sizes are the callers' batch lengths in order, nil for a batch of
// one caller (f(0, 0, n)).
func Groups(n int, sizes []int, f func(g, from, to int)) {
	if sizes == nil {
		f(0, 0, n)
		return
	}
	from := 0
	for g, size := range sizes {
		f(g, from, from+size)
		from += size
	}
}

// Tied reports whether reqs (one caller's batch) has requests tied
// together: two or more AllOrNothing requests (one alone has nothing to be
// tied to).
func Tied(reqs []Request) bool {
	n := 0
	for i := range reqs {
		if reqs[i].AllOrNothing {
			n++
		}
	}
	return n > 1
}

// The all-or-nothing rule. In a batch with a group (Tied), a member that
// is not allowed voids the group (Voids); nothing the group counted then
// stays counted, save what its members that always count counted
// (Uncounts). Every store keeps it, each its own way: the memory store
// under its locks, batch.lua in one step, the approximate table and a
// batch decided in parts after the fact (VoidedCounts).

// Voids reports whether r, decided as d, voids its all-or-nothing group.
func Voids(r *Request, d *Decision) bool { return r.AllOrNothing && !d.Allowed }

// Uncounts reports whether a void group takes back what r counted: a
// member of the group that does not always count.
func Uncounts(r *Request) bool { return r.AllOrNothing && !r.AlwaysCount }

// VoidedCounts returns the positions of the requests of reqs (one Check
// call's batch, decided as ds) whose counted hits must be taken back: when
// reqs has an all-or-nothing group (Tied) and a request of it was not
// allowed, every request of the group that was counted — save those that
// always count, and those the failure policy decided (Degraded: nothing of
// theirs is on the backend). It is the rule of a batch decided in parts
// that each count on their own (Redis Cluster masters, two Redis
// deployments); nil when nothing is to be taken back.
func VoidedCounts(reqs []Request, ds []Decision) []int {
	if !Tied(reqs) {
		return nil
	}
	voided := false
	for i := range reqs {
		voided = voided || Voids(&reqs[i], &ds[i])
	}
	if !voided {
		return nil
	}
	var at []int
	for i := range reqs {
		if Uncounts(&reqs[i]) && ds[i].Counted && !ds[i].Degraded {
			at = append(at, i)
		}
	}
	return at
}
