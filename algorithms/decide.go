package algorithms

import (
	"math"
	"time"
)

// The decision arithmetic, in integer microseconds. Both stores decide with
// it: the memory store on its own state; the Redis store on the state the
// script read before counting (the script decides within-or-over with the
// same operations in the same order, IEEE doubles, and Go checks that the
// two agree), so the two stores give identical decisions; the conformance
// suite checks that they do.
//
// always is Request.AlwaysCount: hits over the limit are counted anyway
// (outcome.allowed stays false). Negative hits are a refund: up to -hits of
// what the state used is given back (a window's count, never below zero; a
// bucket's tokens, never past full; a GCRA's TAT, never before now),
// allowed, and written only where there is state.

// windowState is the state of a fixed or sliding window: the start of the
// window it counts (µs), its count, and (sliding only) the previous window's.
type windowState struct {
	start, count, prev int64
}

// tokenState is a token bucket: tokens at the moment ts (µs).
type tokenState struct {
	tokens float64
	ts     int64
}

// outcome is a decision in microseconds, plus how long the state must be kept.
type outcome struct {
	allowed          bool
	remaining        int64
	resetUS, retryUS int64
	ttlUS            int64 // > 0 when the state was written
	wrote            bool
}

// writeTo fills in d, a zero Decision, with the decision of o. It writes
// field by field: copying a whole Decision into a []Decision on the heap
// costs a bulk write barrier while the GC runs.
func (o outcome) writeTo(d *Decision, limit, nowUS int64) {
	d.Allowed = o.allowed
	d.Limit = limit
	d.Remaining = o.remaining
	d.ResetAfter = time.Duration(o.resetUS) * time.Microsecond
	d.RetryAfter = time.Duration(o.retryUS) * time.Microsecond
	d.Now = time.UnixMicro(nowUS)
}

// decideFixed applies fixed_window.lua's rule to st (nil = no state).
func decideFixed(st *windowState, nowUS, windowUS, limit, hits int64, always bool) (windowState, outcome) {
	start := nowUS - nowUS%windowUS
	var count int64
	if st != nil && st.start == start {
		count = st.count
	}
	o := outcome{resetUS: start + windowUS - nowUS}
	if hits < 0 { // a refund: back up to -hits of the window's count
		o.allowed, o.wrote, o.ttlUS = true, count > 0, o.resetUS
		count -= min(count, -hits)
		o.remaining = max(0, limit-count)
		return windowState{start: start, count: count}, o
	}
	o.allowed = count+hits <= limit
	if (o.allowed || always) && hits > 0 {
		count += hits
		o.wrote = true
		o.ttlUS = o.resetUS
	}
	if !o.allowed {
		o.retryUS = o.resetUS
	}
	o.remaining = max(0, limit-count)
	return windowState{start: start, count: count}, o
}

// decideSliding applies sliding_window.lua's rule to st (nil = no state).
func decideSliding(st *windowState, nowUS, windowUS, limit, hits int64, always bool) (windowState, outcome) {
	start := nowUS - nowUS%windowUS
	var count, prev int64
	if st != nil {
		switch st.start {
		case start:
			count, prev = st.count, st.prev
		case start - windowUS:
			prev = st.count
		}
	}
	elapsed := nowUS - start
	o := outcome{resetUS: windowUS - elapsed}
	if hits < 0 { // a refund: back up to -hits of the current window's count
		o.allowed, o.wrote, o.ttlUS = true, count > 0, start+2*windowUS-nowUS
		count -= min(count, -hits)
	}
	used := float64(prev)*float64(windowUS-elapsed)/float64(windowUS) + float64(count)
	o.allowed = o.allowed || used+float64(hits) <= float64(limit)
	before := count
	if (o.allowed || always) && hits > 0 {
		count += hits
		used += float64(hits)
		o.wrote = true
		o.ttlUS = start + 2*windowUS - nowUS
	}
	if !o.allowed {
		count := before
		switch {
		case hits > limit:
			o.retryUS = o.resetUS
		case count+hits <= limit:
			// Admitted later in this window, once enough of the previous
			// window's weight has slid out.
			o.retryUS = int64(math.Ceil(float64(windowUS-elapsed) - float64(limit-hits-count)*float64(windowUS)/float64(prev)))
		default:
			// Admitted in the next window, once enough of this window's
			// count has slid out.
			o.retryUS = (windowUS - elapsed) + int64(math.Ceil(float64(windowUS)-float64(limit-hits)*float64(windowUS)/float64(count)))
		}
	}
	o.remaining = max(0, int64(math.Floor(float64(limit)-used)))
	return windowState{start: start, count: count, prev: prev}, o
}

// decideToken applies token_bucket.lua's rule to st (nil = a full bucket).
// rate is in tokens per second.
func decideToken(st *tokenState, nowUS, limit int64, rate float64, hits int64, always bool) (tokenState, outcome) {
	tokens := float64(limit)
	if st != nil {
		elapsed := nowUS - st.ts
		if elapsed < 0 {
			elapsed = 0
		}
		tokens = math.Min(float64(limit), st.tokens+float64(elapsed)*rate/1e6)
	}
	var o outcome
	o.allowed = tokens >= float64(hits)
	before := tokens
	if (o.allowed || always) && hits > 0 {
		tokens -= float64(hits)
		o.wrote = true
	}
	if hits < 0 && st != nil { // a refund: up to -hits tokens back, never past full
		tokens = math.Min(float64(limit), tokens-float64(hits))
		o.wrote = true
	}
	o.resetUS = int64(math.Ceil((float64(limit) - tokens) / rate * 1e6))
	if o.wrote {
		o.ttlUS = max(o.resetUS, 1000)
	}
	if !o.allowed {
		if hits > limit {
			o.retryUS = o.resetUS
		} else {
			o.retryUS = int64(math.Ceil((float64(hits) - before) / rate * 1e6))
		}
	}
	o.remaining = max(0, int64(math.Floor(tokens)))
	return tokenState{tokens: tokens, ts: nowUS}, o
}

// gcraState is a GCRA's theoretical arrival time (TAT): tat + rem/p µs, with
// p from gcraUnits and 0 ≤ rem < p.
type gcraState struct {
	tat, rem int64
}

// maxExact bounds every integer GCRA computes: below 2^53 it is exact in an
// IEEE double, and so in Redis Lua. Limit.Validate refuses a GCRA limit whose
// capacity (limit × c of gcraUnits) exceeds it.
const maxExact = 1<<53 - 1

// gcraUnits returns the exact integer time unit of a GCRA limit of limit hits
// per window µs: with g = gcd(limit, window), one µs is p = limit/g units and
// the emission interval T = window/limit is c = window/g units. The capacity
// (window = limit × T) is limit × c units.
func gcraUnits(limit, windowUS int64) (p, c int64) {
	g, b := limit, windowUS
	for b > 0 {
		g, b = b, g%b
	}
	return limit / g, windowUS / g
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b < a {
		q++
	}
	return q
}

// decideGCRA applies gcra.lua's rule to st (nil = idle). All arithmetic is
// in integer units of gcraUnits, below maxExact, so it is exact. An
// always-counting limit's debt (TAT further ahead than a window) is kept, up
// to maxExact units; any other limit treats TAT more than a window ahead as
// a clock gone back, and counts it as a full window.
func decideGCRA(st *gcraState, nowUS, windowUS, limit, hits int64, always bool) (gcraState, outcome) {
	p, c := gcraUnits(limit, windowUS)
	return decideGCRAIn(st, nowUS, windowUS, limit, hits, always, p, c)
}

// decideGCRAIn is decideGCRA in the units p and c that gcraUnits(limit,
// windowUS) returns, for a caller that has them at hand.
func decideGCRAIn(st *gcraState, nowUS, windowUS, limit, hits int64, always bool, p, c int64) (gcraState, outcome) {
	capacity := limit * c
	// level is how far TAT lies ahead of now, in units (0 when TAT ≤ now).
	var level int64
	if st != nil {
		switch ahead := st.tat - nowUS; {
		case ahead > windowUS && !always:
			// Only if the clock went back: as far ahead as TAT may be.
			level = capacity
		case ahead >= 0 && always:
			level = min(ahead*p+st.rem, maxExact)
		case ahead >= 0:
			level = min(ahead*p+st.rem, capacity)
		}
	}
	var o outcome
	o.allowed = hits < 0 || (hits <= limit && hits*c <= capacity-level)
	before := level
	if (o.allowed || always) && hits > 0 {
		level = min(level+hits*c, maxExact)
		o.wrote = true
	}
	if hits < 0 && st != nil { // a refund: TAT back by up to -hits intervals, never before now
		level -= min(level, min(-hits, maxExact/c)*c)
		o.wrote = true
	}
	o.resetUS = ceilDiv(level, p)
	if o.wrote {
		o.ttlUS = max(o.resetUS, 1000)
	}
	if !o.allowed {
		if hits > limit {
			o.retryUS = o.resetUS
		} else {
			// Until TAT has come close enough to now for hits more.
			o.retryUS = ceilDiv(before-(limit-hits)*c, p)
		}
	}
	o.remaining = max(0, capacity-level) / c
	return gcraState{tat: nowUS + level/p, rem: level % p}, o
}
