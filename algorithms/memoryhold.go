package algorithms

import (
	"context"
	"math"
)

// Holds in memory (see Hold): each shard keeps the holds of its
// identifiers beside their states, by holdName. A hold's hits are in its
// state's count like any admitted hits; a settle or the hold's expiry puts
// the difference back in the window or bucket it was counted in. Expired
// holds are given back before the shard decides anything at or after the
// earliest expiry it keeps (nextHoldUS: one comparison per decision), and
// by Sweep, so a peek after an expiry never counts the hold.

// holdStatus is where a hold stands.
type holdStatus uint8

const (
	holdHeld holdStatus = iota
	holdSettled
	holdExpired
)

// memoryHold is one hold: the request that made it (without its Hold),
// where its state lives, what it holds, and until when.
type memoryHold struct {
	req      Request
	p        spot
	hits     int64
	start    int64 // a window's start (µs) when it was counted
	expUS    int64
	forgetUS int64 // when its record (a tombstone once settled) is dropped
	status   holdStatus
}

// holdName names a hold among every hold of a shard.
func holdName(r *Request, id string) string {
	b := make([]byte, 0, 64+len(id))
	b = AppendKeyPart(b, r.Key.Scope)
	b = append(b, ':')
	b = AppendKeyPart(b, r.Key.Identifier)
	b = append(b, ':')
	b = AppendStateName(b, r)
	b = append(b, ':')
	return string(append(b, id...))
}

// keepHolds records the holds of the requests of a batch that were
// admitted and counted (out), and sets their HoldExpires. Call it with the
// requests' shards locked, at nowUS.
func (s *MemoryStore) keepHold(r *Request, p *spot, nowUS int64, d *Decision) {
	if r.Hold == nil || !d.Counted || !d.Allowed {
		return
	}
	ttlUS := r.Hold.TTL.Microseconds()
	h := &memoryHold{req: *r, p: *p, hits: r.Hits, expUS: nowUS + ttlUS}
	h.req.Hold = nil
	h.forgetUS = h.expUS + HoldKeep(r.Limit, r.Hold.TTL).Microseconds()
	if w := p.lk.windowUS; w > 0 {
		h.start = nowUS - nowUS%w
	}
	sh := p.sh
	if sh.holds == nil {
		sh.holds = map[string]*memoryHold{}
	}
	sh.holds[holdName(r, r.Hold.ID)] = h
	sh.nextHoldUS = min(sh.nextHoldUS, h.expUS)
	d.HoldExpires = d.Now.Add(r.Hold.TTL)
}

// expireHolds gives back the holds of the shard that expired by nowUS,
// drops the records past their keep, and sets nextHoldUS to the earliest
// moment one of them changes again. Call it with sh.mu held.
func (sh *memoryShard) expireHolds(nowUS int64) {
	next := int64(math.MaxInt64)
	for name, h := range sh.holds {
		if h.status == holdHeld && h.expUS <= nowUS {
			sh.adjust(h, -h.hits, nowUS)
			h.status = holdExpired
		}
		switch {
		case h.forgetUS <= nowUS:
			delete(sh.holds, name)
		case h.status == holdHeld:
			next = min(next, h.expUS)
		default:
			next = min(next, h.forgetUS)
		}
	}
	sh.nextHoldUS = next
}

// adjust counts delta more hits (negative: fewer) in the window or bucket
// that h was counted in, at nowUS: given back by the refund rule (a
// window's count never below 0, a bucket never past full, a GCRA's TAT
// never before now), counted past the limit as AlwaysCount would. A window
// that is over and gone takes nothing. Call it with sh.mu held.
func (sh *memoryShard) adjust(h *memoryHold, delta, nowUS int64) {
	if delta == 0 {
		return
	}
	p, r := &h.p, &h.req
	e := sh.find(&r.Key, &p.lk, p.h)
	st := alive(e, nowUS)
	switch p.lk.alg {
	case fixedWindowN, slidingWindowN:
		if st == nil {
			return
		}
		var n *int64
		switch w := &st.window; {
		case w.start == h.start:
			n = &w.count
		case p.lk.alg == slidingWindowN && w.start == h.start+p.lk.windowUS:
			n = &w.prev
		default:
			return
		}
		*n = max(0, *n+delta)
	case tokenBucketN:
		var prev *tokenState
		if st != nil {
			prev = &st.bucket
		}
		next, o := decideToken(prev, nowUS, r.Limit.Limit, p.rate, delta, true)
		if o.wrote {
			e = sh.entry(e, &r.Key, &p.lk, p.h)
			e.state.bucket, e.state.expiresUS = next, nowUS+o.ttlUS
		}
	case gcraN:
		var prev *gcraState
		if st != nil {
			prev = &st.cell
		}
		windowUS := r.Limit.Window.Microseconds()
		up, uc := sh.gcraUnits(r.Limit.Limit, windowUS)
		next, o := decideGCRAIn(prev, nowUS, windowUS, r.Limit.Limit, delta, true, up, uc)
		if o.wrote {
			e = sh.entry(e, &r.Key, &p.lk, p.h)
			e.state.cell, e.state.expiresUS = next, nowUS+o.ttlUS
		}
	}
}

// Settle settles each hold in the shard of its identifier.
func (s *MemoryStore) Settle(ctx context.Context, sts []Settle) ([]SettleResult, error) {
	if err := ValidateSettles(sts); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]SettleResult, len(sts))
	nowUS := s.nowUS()
	for i := range sts {
		st := &sts[i]
		var p spot
		s.place(&st.Request, &p)
		p.sh.mu.Lock()
		out[i] = p.sh.settle(st, &p, p.sh.at(nowUS))
		p.sh.mu.Unlock()
	}
	return out, nil
}

// settle settles st at nowUS. Call it with sh.mu held; p is st.Request's
// spot.
func (sh *memoryShard) settle(st *Settle, p *spot, nowUS int64) SettleResult {
	if nowUS >= sh.nextHoldUS {
		sh.expireHolds(nowUS)
	}
	h := sh.holds[holdName(&st.Request, st.ID)]
	switch {
	case h == nil:
		return SettleResult{Outcome: UnknownHold}
	case h.status == holdSettled:
		return SettleResult{Outcome: AlreadySettled}
	case h.status == holdExpired:
		return SettleResult{Outcome: Expired}
	}
	sh.adjust(h, st.Committed()-h.hits, nowUS)
	h.status = holdSettled
	res := SettleResult{Outcome: Settled, Held: h.hits}
	peek := st.Request
	peek.Hits = 0
	sh.decide(p, &peek, nowUS, false, &res.Decision)
	res.Decision.Allowed = true
	return res
}
