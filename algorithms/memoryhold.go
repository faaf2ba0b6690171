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
	holdCleared // its state was reset or cleared while it was held
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
	case h.status == holdCleared:
		return SettleResult{Outcome: Cleared}
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

// clearHolds marks the held holds of the shard that gone names as cleared
// (their state was reset or cleared): their hits went with the state, and
// a settle finds them Cleared. Holds that expired by nowUS are given back
// first, so they stay Expired. Call it with sh.mu held, before the states
// are dropped.
func (sh *memoryShard) clearHolds(nowUS int64, gone func(h *memoryHold) bool) {
	if len(sh.holds) == 0 {
		return
	}
	if nowUS >= sh.nextHoldUS {
		sh.expireHolds(nowUS)
	}
	for _, h := range sh.holds {
		if h.status == holdHeld && gone(h) {
			h.status = holdCleared
		}
	}
	sh.expireHolds(nowUS) // nextHoldUS: a cleared hold waits only to be forgotten
}

// Held returns, for each request, the hits its counter's unexpired,
// unsettled holds hold: those counted in its current window (the window
// algorithms) or in its bucket. Nothing is counted.
func (s *MemoryStore) Held(ctx context.Context, reqs []Request) ([]int64, error) {
	if err := ValidateBatch(reqs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]int64, len(reqs))
	nowUS := s.nowUS()
	for i := range reqs {
		r := &reqs[i]
		var p spot
		s.place(r, &p)
		p.sh.mu.Lock()
		at := p.sh.at(nowUS)
		if at >= p.sh.nextHoldUS {
			p.sh.expireHolds(at)
		}
		var start int64
		if w := p.lk.windowUS; w > 0 {
			start = at - at%w
		}
		for _, h := range p.sh.holds {
			if h.status == holdHeld && h.p.lk == p.lk && h.req.Key == r.Key && h.start == start {
				out[i] += h.hits
			}
		}
		p.sh.mu.Unlock()
	}
	return out, nil
}

// HeldHits is the hits every unexpired, unsettled hold of the store holds
// now (the throttle_reservations_held_hits gauge of a memory store).
func (s *MemoryStore) HeldHits() int64 {
	nowUS := s.nowUS()
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if len(sh.holds) > 0 {
			if at := sh.at(nowUS); at >= sh.nextHoldUS {
				sh.expireHolds(at)
			}
			for _, h := range sh.holds {
				if h.status == holdHeld {
					n += h.hits
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}
