package redisstore

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Approximate limits (algorithms.Approximate): decisions from memory
// within a lease of the limit taken from Redis, one global limit kept.
//
// Redis holds, per approximate limit and window, a counter of what every
// replica admitted plus every replica's lease not yet spent, and never
// grants a lease past the limit (approx.lua). Each replica keeps, per
// window, the counter it last read (global), its lease (held), and the
// hits it admitted since its last call (pending, and inflight while the
// call is out). A request is admitted from memory while the lease covers
// it (approxdecide.go); past it the replica asks Redis at once, one round
// trip its concurrent callers share (approxask.go), and refuses only when
// Redis has nothing left to grant. Every interval the syncer
// (approxsync.go) reports each busy window's hits and resizes its lease to
// about two intervals of this replica's own demand, capped by what is left
// divided among the replicas (they count themselves in a registry,
// approxregistry.go), so an idle replica holds nothing and the unused part
// goes back. A window no answer has covered yet (a new key) has a blind
// budget of limit / (blindParts × replicas), so distinct keys far below
// their limit cost Redis nothing: over all replicas less than 1 % of the
// limit, the most that can be admitted past it. docs/algorithms.md has the
// bound and the measurements.

// blindParts bounds what a replica admits on a window no answer has
// covered (a new key, or Redis not answering): limit / (blindParts ×
// replicas), 0 when that is below 1 (then its first hit asks). A window is
// sent once half of that is pending, so a key far below its limit (a new
// identifier each request) costs Redis nothing. Over all replicas the
// blind budgets are below limit / blindParts: under 1 %.
const blindParts = 128

// approxStripes is the number of lock stripes of the table: a limit's
// entry lives in the stripe its hash names, under that stripe's lock.
// (A stripe divides the table's locking, not Redis: that is a master.)
const approxStripes = 64

// DefaultApproximateInterval is how often approximate limits sync.
const DefaultApproximateInterval = 100 * time.Millisecond

// DefaultApproximateMaxKeys bounds the table: the approximate limits a
// replica holds at once (about 350 bytes each, with its key).
const DefaultApproximateMaxKeys = 1 << 20

// approxTable is this replica's view of the approximate limits it decides.
type approxTable struct {
	seed     maphash.Seed
	stripes  [approxStripes]approxStripe
	interval time.Duration
	maxKeys  int // per lock
	// replicas is how many replicas decide approximate limits, as the
	// registry last said; 0 until it has: approximate limits are then
	// decided exactly. settled: the registry was read an interval after
	// this replica joined it, so the others count it too; until then
	// windows have no blind budget (their first hit asks).
	replicas atomic.Int64
	settled  atomic.Bool
	// asks counts the asks by result; nil in table-only tests.
	asks *approxAskCounters
	// clock is Redis's clock as the syncs' TIME samples it: windows start
	// where Redis says.
	clock    redisClock
	now      func() time.Time // the local clock; tests set Options.Now
	fixedNow bool             // now is Options.Now: Redis's clock is not asked
	// dropped counts hits given up: their window was over before a sync
	// could send them.
	dropped atomic.Int64
	// base is when the table was made: the monotonic origin of leases'
	// expiries (mono).
	base time.Time
	// blindHits counts the hits admitted outside any lease (blind budgets,
	// and the failure policy's admissions when an ask got no answer): the
	// most by which approximate limits can have gone over. excess counts
	// what Redis saw past a limit when those hits were reported.
	blindHits, excess atomic.Int64
	// rtt is the moving average of the syncs' round trips, in ns
	// (roundTrip).
	rtt atomic.Int64
	// firstTimeout bounds the calls before the first answer, when the
	// round trip is not known yet (a global Redis a region away: a new
	// connection's handshake is several round trips). 0: none.
	firstTimeout time.Duration
}

// approxStripe is one lock's part of the table.
type approxStripe struct {
	mu sync.Mutex
	m  map[uint64]*approxEntry // by approxKey's hash; a chain of the same hash
	n  int                     // entries
	// queue holds the entries with hits due to be sent, so a sync visits
	// them and not every entry (a key far below its limit is never due).
	queue []*approxEntry
}

// enqueue queues e for the next sync, once. st.mu is held.
func (st *approxStripe) enqueue(e *approxEntry) {
	if !e.queued {
		e.queued = true
		st.queue = append(st.queue, e)
	}
}

// each calls f with every entry. st.mu is held.
func (st *approxStripe) each(f func(*approxEntry)) {
	for _, head := range st.m {
		for e := head; e != nil; e = e.next {
			f(e)
		}
	}
}

func newApproxTable(interval time.Duration, maxKeys int, now func() time.Time) *approxTable {
	t := &approxTable{seed: maphash.MakeSeed(), interval: interval, maxKeys: max(1, maxKeys/approxStripes), now: now, base: time.Now()}
	if t.now == nil {
		t.now = time.Now
	} else {
		t.fixedNow = true
	}
	for i := range t.stripes {
		t.stripes[i].m = map[uint64]*approxEntry{}
	}
	return t
}

// hash is the hash of r's Key and Limit, and its lock.
func (t *approxTable) hash(r *algorithms.Request) (uint64, *approxStripe) {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(r.Key.Scope)
	h.WriteByte(0)
	h.WriteString(r.Key.Identifier)
	h.WriteByte(0)
	h.WriteString(r.Key.Name)
	h.WriteByte(0)
	h.WriteString(string(r.Limit.Algorithm))
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:], uint64(r.Limit.Limit))
	binary.LittleEndian.PutUint64(b[8:], uint64(r.Limit.Window))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(r.Limit.RefillRate))
	h.Write(b[:])
	sum := h.Sum64()
	return sum, &t.stripes[sum%approxStripes]
}

// find returns the entry of r (of hash h), or nil. st.mu is held.
func (st *approxStripe) find(h uint64, r *algorithms.Request) *approxEntry {
	for e := st.m[h]; e != nil; e = e.next {
		if e.is(r) {
			return e
		}
	}
	return nil
}

// add puts e, of hash h, in the stripe. st.mu is held.
func (st *approxStripe) add(h uint64, e *approxEntry) {
	e.next = st.m[h]
	st.m[h] = e
	st.n++
}

// nowUS is the time of a decision in µs on Redis's clock, as the syncs
// last measured it.
func (t *approxTable) nowUS() (local time.Time, us int64) {
	local = t.now()
	if t.fixedNow {
		return local, local.UnixMicro()
	}
	return local, local.UnixMicro() + t.clock.offset()
}

// mono is at (a time.Now reading) in ns on this replica's monotonic
// clock: what leases' expiries are measured on, whatever the wall clock
// or Options.Now do.
func (t *approxTable) mono(at time.Time) int64 { return int64(at.Sub(t.base)) }

// monoNow is mono at local, the time of a decision, or now when local is
// Options.Now's.
func (t *approxTable) monoNow(local time.Time) int64 {
	if t.fixedNow {
		local = time.Now()
	}
	return t.mono(local)
}

// size is how many limits the table holds.
func (t *approxTable) size() int {
	n := 0
	for i := range t.stripes {
		st := &t.stripes[i]
		st.mu.Lock()
		n += st.n
		st.mu.Unlock()
	}
	return n
}

// unsent is how many hits wait to be sent (pending and in flight).
func (t *approxTable) unsent() int64 {
	var n int64
	for i := range t.stripes {
		st := &t.stripes[i]
		st.mu.Lock()
		st.each(func(e *approxEntry) { n += e.cur.unsent() + e.prev.unsent() })
		st.mu.Unlock()
	}
	return n
}

// undo takes back hits that decideIn counted for r at at (its all-or-nothing
// group was void), and reports whether the table holds r: false when it
// did not decide r (it was full, and Redis decided).
func (t *approxTable) undo(r *algorithms.Request, at time.Time) bool {
	h, st := t.hash(r)
	num := at.UnixMicro() / r.Limit.Window.Microseconds()
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.find(h, r)
	if e == nil {
		return false
	}
	for _, w := range []*approxWindow{&e.cur, &e.prev} {
		if w.num == num {
			w.takeBack(r.Hits)
			break
		}
	}
	return true
}

// takeBack takes back hits counted in w: from its pending hits, and
// those a call has taken in flight meanwhile through back, which the next
// call carries (approx.lua subtracts what its total adds).
func (w *approxWindow) takeBack(hits int64) {
	fromPending := min(hits, w.pending)
	w.pending -= fromPending
	w.back += hits - fromPending
}

// evict drops the entries with nothing left to send whose windows are over
// (at nowUS, µs), and reports whether it made room. st.mu is held.
func (st *approxStripe) evict(nowUS int64) bool {
	n := st.n
	st.dropAll(func(e *approxEntry) bool { return e.over(nowUS) })
	return st.n < n
}

// sweep forgets what is left of the windows that are over at nowUS (hits
// never due are forgotten, those due are given up and counted), queues
// what has become due, and drops the entries with nothing left. st.mu is
// held.
func (st *approxStripe) sweep(t *approxTable, nowUS int64) {
	st.dropAll(func(e *approxEntry) bool {
		e.dropExpired(t, nowUS)
		if t.due(&e.cur, e, false) || t.due(&e.prev, e, false) {
			st.enqueue(e) // due since its last decision (the blind budget shrank)
		}
		return e.over(nowUS)
	})
}

// dropAll drops the entries gone says. st.mu is held.
func (st *approxStripe) dropAll(gone func(*approxEntry) bool) {
	for h := range st.m {
		st.drop(h, gone)
	}
}

// drop drops the entries of hash h gone says. st.mu is held.
func (st *approxStripe) drop(h uint64, gone func(*approxEntry) bool) {
	var keep *approxEntry
	for e := st.m[h]; e != nil; {
		next := e.next
		if gone(e) {
			e.dropped = true
			st.n--
		} else {
			e.next, keep = keep, e
		}
		e = next
	}
	if keep == nil {
		delete(st.m, h)
	} else {
		st.m[h] = keep
	}
}

// forget drops what the table holds of (scope, identifier): of every
// limit, or of those of algorithm alg, and reports whether it held any.
// Reset and Clear forget locally what they delete in Redis (other replicas
// see it at their next sync).
func (t *approxTable) forget(scope, identifier string, alg algorithms.Algorithm) bool {
	held := false
	for i := range t.stripes {
		st := &t.stripes[i]
		st.mu.Lock()
		n := st.n
		st.dropAll(func(e *approxEntry) bool {
			k := &e.req.Key
			return k.Scope == scope && k.Identifier == identifier && (alg == "" || e.req.Limit.Algorithm == alg)
		})
		held = held || st.n < n
		st.mu.Unlock()
	}
	return held
}

// forgetRequest drops the table's entry of r's Key and Limit (Clear), and
// reports whether it held one.
func (t *approxTable) forgetRequest(r *algorithms.Request) bool {
	h, st := t.hash(r)
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.n
	st.drop(h, func(e *approxEntry) bool { return e.is(r) })
	return st.n < n
}

// leased is how much of their leases the windows hold unspent.
func (t *approxTable) leased() int64 {
	var n int64
	for i := range t.stripes {
		st := &t.stripes[i]
		st.mu.Lock()
		st.each(func(e *approxEntry) {
			n += max(0, e.cur.held-e.cur.unsent()) + max(0, e.prev.held-e.prev.unsent())
		})
		st.mu.Unlock()
	}
	return n
}
