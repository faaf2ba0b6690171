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

// Approximate limits (algorithms.Approximate): decisions from memory, one
// global limit kept through batched Redis syncs.
//
// Each replica keeps, per approximate limit and window, the shared count it
// last read from Redis (global), the hits it admitted since and has not sent
// (pending), and those a sync has on its way (inflight). A request is
// decided on global + pending + inflight, by the algorithm's arithmetic, and
// within a budget: the most this replica may have admitted without Redis
// having seen it. The syncer (approxsync.go) sends pending hits every
// interval, reads the totals back, and sets each budget to this replica's
// share of what is left: (limit − global) / replicas, where replicas is how
// many replicas decide approximate limits (they count themselves in Redis).
// So every replica spends at most its share of what is left until its next
// sync, and the sum of the shares is what is left: over-admission does not
// grow with replicas × interval. What remains of it comes from the shares
// being read at different moments (at most what the others synced within
// the last interval, divided among the replicas) and from replicas that
// decide a window without having synced it: a blind budget of limit /
// (blindParts × replicas) each. docs/algorithms.md has the bound and the
// measurements.

// blindParts bounds what a replica admits on a window it has not synced
// (a new key, or Redis unreachable for two intervals): limit / (blindParts
// × replicas). A window is sent once half of that is pending, so a key far
// below its limit (a new identifier each request) costs Redis nothing.
const blindParts = 64

// approxShards is the number of locks of the table.
const approxShards = 64

// DefaultApproximateInterval is how often approximate limits sync.
const DefaultApproximateInterval = 100 * time.Millisecond

// DefaultApproximateMaxKeys bounds the table: the approximate limits a
// replica holds at once (about 200 bytes each, with its key).
const DefaultApproximateMaxKeys = 1 << 20

// approxTable is this replica's view of the approximate limits it decides.
type approxTable struct {
	seed     maphash.Seed
	shards   [approxShards]approxShard
	interval time.Duration
	maxKeys  int // per lock
	// replicas is how many replicas decide approximate limits, as the
	// registry last said; 0 until it has (taken as 1). rank is this
	// replica's place among them, 0..replicas-1.
	replicas, rank atomic.Int64
	// clock keeps the best sample of Redis's clock; offsetUS is its offset.
	clock redisClock
	// offsetUS is Redis's clock minus the local one, from the syncs'
	// TIME: windows start where Redis says.
	offsetUS atomic.Int64
	now      func() time.Time // the local clock; tests set Options.Now
	fixedNow bool             // now is Options.Now: Redis's clock is not asked
	// dropped counts hits given up: their window was over before a sync
	// could send them.
	dropped atomic.Int64
}

type approxShard struct {
	mu sync.Mutex
	m  map[uint64]*approxEntry // by approxKey's hash; a chain of the same hash
	n  int                     // entries
	// queue holds the entries with hits due to be sent, so a sync visits
	// them and not every entry (a key far below its limit is never due).
	queue []*approxEntry
}

// enqueue queues e for the next sync, once. sh.mu is held.
func (sh *approxShard) enqueue(e *approxEntry) {
	if !e.queued {
		e.queued = true
		sh.queue = append(sh.queue, e)
	}
}

// each calls f with every entry. sh.mu is held.
func (sh *approxShard) each(f func(*approxEntry)) {
	for _, head := range sh.m {
		for e := head; e != nil; e = e.next {
			f(e)
		}
	}
}

func newApproxTable(interval time.Duration, maxKeys int, now func() time.Time) *approxTable {
	t := &approxTable{seed: maphash.MakeSeed(), interval: interval, maxKeys: max(1, maxKeys/approxShards), now: now}
	if t.now == nil {
		t.now = time.Now
	} else {
		t.fixedNow = true
	}
	for i := range t.shards {
		t.shards[i].m = map[uint64]*approxEntry{}
	}
	return t
}

// hash is the hash of r's Key and Limit, and its lock.
func (t *approxTable) hash(r *algorithms.Request) (uint64, *approxShard) {
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
	return sum, &t.shards[sum%approxShards]
}

// find returns the entry of r (of hash h), or nil. sh.mu is held.
func (sh *approxShard) find(h uint64, r *algorithms.Request) *approxEntry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.is(r) {
			return e
		}
	}
	return nil
}

// add puts e, of hash h, in the shard. sh.mu is held.
func (sh *approxShard) add(h uint64, e *approxEntry) {
	e.next = sh.m[h]
	sh.m[h] = e
	sh.n++
}

// nowUS is the time of a decision in µs on Redis's clock, as the syncs
// last measured it.
func (t *approxTable) nowUS() (local time.Time, us int64) {
	local = t.now()
	if t.fixedNow {
		return local, local.UnixMicro()
	}
	return local, local.UnixMicro() + t.offsetUS.Load()
}

// n is the replica count the shares divide by.
func (t *approxTable) n() int64 { return max(1, t.replicas.Load()) }

// sample notes Redis's time t, asked between sent and got.
func (t *approxTable) sample(sent, got, at time.Time) {
	t.clock.sample(sent, got, at)
	t.clock.mu.Lock()
	t.offsetUS.Store(t.clock.offsetUS)
	t.clock.mu.Unlock()
}

// size is how many limits the table holds.
func (t *approxTable) size() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// unsent is how many hits wait to be sent (pending and in flight).
func (t *approxTable) unsent() int64 {
	var n int64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.each(func(e *approxEntry) {
			n += e.cur.pending + e.cur.inflight + e.prev.pending + e.prev.inflight
		})
		sh.mu.Unlock()
	}
	return n
}

// blind is a window's budget before it has synced: limit / (blindParts ×
// replicas), at least 1.
func (t *approxTable) blind(limit int64) int64 {
	return max(1, limit/(blindParts*t.n()))
}

// allowance is how much of w may be unsent at localNS: the budget of its
// last sync while that is fresh (within two intervals), else the blind
// budget (a window whose budget ran out sends nothing, so it is not synced
// again until it has spent some of that).
func (t *approxTable) allowance(w *approxWindow, limit, localNS int64) int64 {
	if w.syncedAt != 0 && localNS-w.syncedAt <= 2*t.interval.Nanoseconds() {
		return w.budget
	}
	return t.blind(limit)
}

// decide decides r (approximate, valid) into d and counts it locally when it
// is within its limit and this replica's budget. It reports false when the
// table is full and r must be decided exactly.
func (t *approxTable) decide(r *algorithms.Request, d *algorithms.Decision) bool {
	local, nowUS := t.nowUS()
	return t.decideAt(r, d, local, nowUS)
}

// decideAt is decide at local time local, Redis's nowUS (a batch reads the
// clock once).
func (t *approxTable) decideAt(r *algorithms.Request, d *algorithms.Decision, local time.Time, nowUS int64) bool {
	h, sh := t.hash(r)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, r)
	if e == nil {
		if sh.n >= t.maxKeys && !sh.evict(nowUS) {
			return false
		}
		e = &approxEntry{req: algorithms.Request{Key: r.Key, Limit: r.Limit, Unindexed: r.Unindexed}}
		sh.add(h, e)
	}
	wUS := r.Limit.Window.Microseconds()
	t.dropped.Add(e.roll(nowUS / wUS))
	if e.prev.pending > 0 {
		sh.enqueue(e) // the window before is sent as soon as it is over
	}
	w := &e.cur
	f := algorithms.Found{Count: w.global + w.pending + w.inflight, Prev: e.prevView()}
	algorithms.Decide(r, &f, nowUS, d)
	unsent := w.pending + w.inflight
	allow := t.allowance(w, r.Limit.Limit, local.UnixNano())
	switch {
	case !d.Counted:
		// A read, or over the limit: what this replica would admit now.
		d.Remaining = max(0, min(d.Remaining, allow-unsent))
	case unsent+r.Hits > allow && !r.AlwaysCount:
		// Within the limit as far as this replica knows, but over its
		// share: refused until the next sync brings a new one.
		d.Allowed, d.Counted = false, false
		d.Remaining = max(0, allow-unsent)
		d.RetryAfter = min(t.interval, d.ResetAfter)
	default:
		w.pending += r.Hits
		d.Remaining = max(0, min(d.Remaining, allow-unsent-r.Hits))
	}
	// Due now, or refused and due once the replica count grew (which
	// shrinks the blind budget): queued either way.
	if t.due(w, e, false) {
		sh.enqueue(e)
	}
	return true
}

// undo takes back hits that decide counted for r at at (its all-or-nothing
// group was void), and reports whether the table holds r: false when it
// did not decide r (it was full, and Redis decided).
func (t *approxTable) undo(r *algorithms.Request, at time.Time) bool {
	h, sh := t.hash(r)
	num := at.UnixMicro() / r.Limit.Window.Microseconds()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, r)
	if e != nil && e.cur.num == num {
		e.cur.pending = max(0, e.cur.pending-r.Hits)
	}
	return e != nil
}

// evict drops the entries with nothing left to send whose windows are over
// (at nowUS, µs), and reports whether it made room. sh.mu is held.
func (sh *approxShard) evict(nowUS int64) bool {
	n := sh.n
	sh.dropAll(func(e *approxEntry) bool { return e.over(nowUS) })
	return sh.n < n
}

// sweep forgets what is left of the windows that are over at nowUS (hits
// never due are forgotten, those due are given up and counted), queues
// what has become due, and drops the entries with nothing left. sh.mu is
// held.
func (sh *approxShard) sweep(t *approxTable, nowUS int64) {
	sh.dropAll(func(e *approxEntry) bool {
		e.dropExpired(t, nowUS)
		if t.due(&e.cur, e, false) || t.due(&e.prev, e, false) {
			sh.enqueue(e) // due since its last decision (the blind budget shrank)
		}
		return e.over(nowUS)
	})
}

// dropAll drops the entries gone says. sh.mu is held.
func (sh *approxShard) dropAll(gone func(*approxEntry) bool) {
	for h := range sh.m {
		sh.drop(h, gone)
	}
}

// drop drops the entries of hash h gone says. sh.mu is held.
func (sh *approxShard) drop(h uint64, gone func(*approxEntry) bool) {
	var keep *approxEntry
	for e := sh.m[h]; e != nil; {
		next := e.next
		if gone(e) {
			sh.n--
		} else {
			e.next, keep = keep, e
		}
		e = next
	}
	if keep == nil {
		delete(sh.m, h)
	} else {
		sh.m[h] = keep
	}
}

// forget drops what the table holds of (scope, identifier): of every
// limit, or of those of algorithm alg. Reset and Clear forget locally
// what they delete in Redis (other replicas see it at their next sync).
func (t *approxTable) forget(scope, identifier string, alg algorithms.Algorithm) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.dropAll(func(e *approxEntry) bool {
			k := &e.req.Key
			return k.Scope == scope && k.Identifier == identifier && (alg == "" || e.req.Limit.Algorithm == alg)
		})
		sh.mu.Unlock()
	}
}

// forgetRequest drops the table's entry of r's Key and Limit (Clear).
func (t *approxTable) forgetRequest(r *algorithms.Request) {
	h, sh := t.hash(r)
	sh.mu.Lock()
	sh.drop(h, func(e *approxEntry) bool { return e.is(r) })
	sh.mu.Unlock()
}
