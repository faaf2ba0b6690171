package algorithms

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"
)

// MemoryOptions configures a MemoryStore. Every field is optional.
type MemoryOptions struct {
	// Now is the clock, read once per batch. Default: the wall clock, as
	// time.Now gives it, read more cheaply (see wallClock). The store
	// never decides at a moment earlier than one it already decided at
	// for the same (scope, identifier): a reading behind that counts as
	// that moment (see memoryShard.at).
	Now func() time.Time
	// Shards is the number of independently locked shards. Default 64.
	Shards int
	// SweepEvery is how often Run drops expired state. Default 10s.
	SweepEvery time.Duration
}

// MemoryStore keeps counters in this process: the single-node store, and the
// per-replica fallback of FAILURE_MODE=local. It gives the same decisions as
// RedisStore. Expired state is dropped when touched and by Run's sweeps, so
// memory stays bounded by the identifiers active within their windows.
//
// All the limits of one (scope, identifier) live in one shard, chosen by a
// hash of the two, in a map from a hash of each limit's memoryKey. A
// decision builds no string and allocates nothing but the batch's result:
// it hashes the key's parts with maphash, finds the state under the shard's
// lock and updates it in place.
type MemoryStore struct {
	nowUS      func() int64 // the clock, in Unix µs
	seed       maphash.Seed
	salt       [3]uint64 // random, from seed: keys the hash of a limit's numbers
	shards     []memoryShard
	sweepEvery time.Duration
}

type memoryShard struct {
	mu sync.Mutex
	// states holds each limit's entry under the hash keyHash gives its key;
	// entries whose keys share a hash are chained.
	states map[uint64]*memoryEntry
	// lastUS is the latest moment this shard decided at (see at).
	lastUS int64
	// index is the shard's place in MemoryStore.shards: the order in which
	// an all-or-nothing batch locks several.
	index int32
	// units is the GCRA limit this shard last decided, and its gcraUnits:
	// a request under the same limit skips working them out again.
	units gcraUnitsMemo
	// Pad to two cache lines of its own, so goroutines working on
	// neighbouring shards do not contend on one.
	_ [64]byte
}

// gcraUnitsMemo holds gcraUnits(limit, windowUS): p and c.
type gcraUnitsMemo struct {
	limit, windowUS, p, c int64
}

// gcraUnits returns gcraUnits(limit, windowUS), from sh.units when they are
// of that limit. Call it with sh.mu held.
func (sh *memoryShard) gcraUnits(limit, windowUS int64) (p, c int64) {
	if m := &sh.units; m.limit != limit || m.windowUS != windowUS {
		m.p, m.c = gcraUnits(limit, windowUS)
		m.limit, m.windowUS = limit, windowUS
	}
	return sh.units.p, sh.units.c
}

// memoryKey names one limit's state on one identifier: the same parts, with
// the same meaning, as RedisStore's key (stateKey). A named limit is its
// algorithm and name (limit, windowMS and refill stay zero); an unnamed one
// is its algorithm, limit, window in whole ms and, for a token bucket, its
// refill rate (name stays empty). A window algorithm's key also has its
// window in µs, named or not.
type memoryKey struct {
	scope, identifier, name string
	limitKey
}

// limitKey is the part of a memoryKey that is numbers: worked out for each
// request, while the strings are compared where the request holds them.
type limitKey struct {
	limit, windowMS, windowUS int64
	refill                    float64
	alg                       byte // memoryAlg of the algorithm
}

// memoryKeyOf returns the key of key and lk.
func memoryKeyOf(key *Key, lk *limitKey) memoryKey {
	return memoryKey{scope: key.Scope, identifier: key.Identifier, name: key.Name, limitKey: *lk}
}

// is reports whether k is the key of key and lk.
func (k *memoryKey) is(key *Key, lk *limitKey) bool {
	return k.limitKey == *lk && k.identifier == key.Identifier && k.scope == key.Scope && k.name == key.Name
}

// memoryEntry is one limit's key and state in a shard's chain.
type memoryEntry struct {
	key   memoryKey
	state memoryState
	next  *memoryEntry // another key of the same hash
}

// memoryState is one limit's state, of the shape its algorithm uses;
// expiresUS is when it stops mattering.
type memoryState struct {
	window    windowState
	bucket    tokenState
	cell      gcraState
	expiresUS int64
}

// NewMemoryStore returns an empty MemoryStore. Call Run to sweep expired state.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	if opts.Shards <= 0 {
		opts.Shards = 64
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = 10 * time.Second
	}
	s := &MemoryStore{seed: maphash.MakeSeed(), sweepEvery: opts.SweepEvery, shards: make([]memoryShard, opts.Shards)}
	if now := opts.Now; now != nil {
		s.nowUS = func() int64 { return now().UnixMicro() }
	} else {
		s.nowUS = new(wallClock).nowUS
	}
	for i := range s.salt {
		s.salt[i] = maphash.Comparable(s.seed, i)
	}
	for i := range s.shards {
		s.shards[i].states = make(map[uint64]*memoryEntry)
		s.shards[i].index = int32(i)
	}
	return s
}

// Check decides each request against this process's state. The
// all-or-nothing requests of a batch (see checkTied) are decided as one.
func (s *MemoryStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]Decision, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	nowUS := s.nowUS()
	if allOrNothing(reqs) {
		s.checkTied(reqs, out, nowUS)
		return out, nil
	}
	var p spot
	for i := range reqs {
		r := &reqs[i]
		s.place(r, &p)
		sh := p.sh
		sh.mu.Lock()
		at := sh.at(nowUS)
		out[i].Counted = sh.decide(&p, r, at, true, &out[i])
		sh.mu.Unlock()
	}
	return out, nil
}

// checkTied decides a batch with all-or-nothing requests, with every shard
// it touches locked (in index order), so that the group counts as one: at
// its first request over the limit, what the group counted is put back, and
// its other requests are decided without counting (an always-counting one
// counts anyway), as the Redis script does.
func (s *MemoryStore) checkTied(reqs []Request, out []Decision, nowUS int64) {
	ps := make([]placed, len(reqs))
	shards := make([]int32, len(reqs))
	for i := range reqs {
		s.place(&reqs[i], &ps[i].spot)
		shards[i] = ps[i].sh.index
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range shards {
			s.shards[i].mu.Unlock()
		}
	}()
	// One moment for the whole group: the latest of its shards'.
	for _, i := range shards {
		nowUS = max(nowUS, s.shards[i].lastUS)
	}
	for _, i := range shards {
		s.shards[i].at(nowUS)
	}
	voided := false
	for i := range reqs {
		r, p := &reqs[i], &ps[i]
		mayWrite := r.AlwaysCount || !(r.AllOrNothing && voided)
		if e := p.sh.find(&r.Key, &p.lk, p.h); mayWrite && e != nil {
			p.old, p.had = e.state, true
		}
		p.wrote = p.sh.decide(&p.spot, r, nowUS, mayWrite, &out[i]) && mayWrite
		out[i].Counted = p.wrote
		if r.AllOrNothing && !out[i].Allowed && !voided {
			voided = true
			// Last first: a key the group wrote twice gets back the state
			// from before its first write.
			for j := i - 1; j >= 0; j-- {
				if q := &ps[j]; q.wrote && reqs[j].AllOrNothing && !reqs[j].AlwaysCount {
					q.putBack(&reqs[j].Key, nowUS)
					out[j].Counted = false
				}
			}
		}
	}
	if !voided {
		return
	}
	// Within their limits but not counted: say what the state is.
	for i := range reqs {
		if r := &reqs[i]; r.AllOrNothing && !r.AlwaysCount && out[i].Allowed {
			p := &ps[i]
			peek := *r
			peek.Hits = 0
			out[i] = Decision{}
			p.sh.decide(&p.spot, &peek, nowUS, false, &out[i])
			out[i].Allowed = true
		}
	}
}

// spot is where a request's state lives: the numbers of its key (the
// strings are the request's Key), the key's hash and shard, and a token
// bucket's refill rate, worked out once. It holds no string: writing one
// into memory a caller owns costs a write barrier while the GC runs.
type spot struct {
	lk   limitKey
	h    uint64
	sh   *memoryShard
	rate float64
}

// place sets p to r's spot. (A spot returned by value is written in words
// and copied in wider ones, which stalls the CPU.)
func (s *MemoryStore) place(r *Request, p *spot) {
	p.rate = 0
	if r.Limit.Algorithm == TokenBucket {
		p.rate = r.Limit.Refill()
	}
	p.lk.set(r, p.rate)
	idHash := s.identityHash(r.Key.Scope, r.Key.Identifier)
	p.h = s.keyHash(&r.Key, &p.lk, idHash)
	p.sh = s.shard(idHash)
}

// placed is a request's spot in checkTied, and what its state was before
// the request wrote it.
type placed struct {
	spot
	old   memoryState
	had   bool
	wrote bool
}

// putBack restores the state that p's request, of key, wrote over (or
// removes the one it made). Call it with p.sh.mu held.
func (p *placed) putBack(key *Key, nowUS int64) {
	e := p.sh.find(key, &p.lk, p.h)
	if p.had {
		e.state = p.old
		return
	}
	p.sh.drop(p.h, p.sh.states[p.h], nowUS, func(x *memoryEntry) bool { return x == e })
}

// decide applies r's algorithm at nowUS to the state of p (none if it has
// expired), fills in d, a zero Decision, with the decision (all but
// Counted), and returns whether the algorithm counted the hits. It stores
// the new state when it counted them and write is true, in p's entry (a new
// one if it has none). Call it with sh.mu held; sh is p.sh.
func (sh *memoryShard) decide(p *spot, r *Request, nowUS int64, write bool, d *Decision) bool {
	e := sh.find(&r.Key, &p.lk, p.h)
	st := alive(e, nowUS)
	l := &r.Limit
	// Each case writes its part of the state in place (the parts of the
	// other algorithms are never read under this key) and its own outcome
	// to d: an outcome assigned to a variable declared outside the switch,
	// or returned, is copied in wide words from narrow ones, which stalls
	// the CPU.
	switch p.lk.alg {
	case fixedWindowN:
		next, o := decideFixed(windowOf(st), nowUS, p.lk.windowUS, l.Limit, r.Hits, r.AlwaysCount)
		if o.wrote && write {
			e = sh.entry(e, &r.Key, &p.lk, p.h)
			e.state.window, e.state.expiresUS = next, nowUS+o.ttlUS
		}
		o.writeTo(d, l.Limit, nowUS)
		return o.wrote
	case slidingWindowN:
		next, o := decideSliding(windowOf(st), nowUS, p.lk.windowUS, l.Limit, r.Hits, r.AlwaysCount)
		if o.wrote && write {
			e = sh.entry(e, &r.Key, &p.lk, p.h)
			e.state.window, e.state.expiresUS = next, nowUS+o.ttlUS
		}
		o.writeTo(d, l.Limit, nowUS)
		return o.wrote
	case tokenBucketN:
		var prev *tokenState
		if st != nil {
			prev = &st.bucket
		}
		next, o := decideToken(prev, nowUS, l.Limit, p.rate, r.Hits, r.AlwaysCount)
		if o.wrote && write {
			e = sh.entry(e, &r.Key, &p.lk, p.h)
			e.state.bucket, e.state.expiresUS = next, nowUS+o.ttlUS
		}
		o.writeTo(d, l.Limit, nowUS)
		return o.wrote
	case gcraN:
		var prev *gcraState
		if st != nil {
			prev = &st.cell
		}
		windowUS := l.Window.Microseconds()
		up, uc := sh.gcraUnits(l.Limit, windowUS)
		next, o := decideGCRAIn(prev, nowUS, windowUS, l.Limit, r.Hits, r.AlwaysCount, up, uc)
		if o.wrote && write {
			e = sh.entry(e, &r.Key, &p.lk, p.h)
			e.state.cell, e.state.expiresUS = next, nowUS+o.ttlUS
		}
		o.writeTo(d, l.Limit, nowUS)
		return o.wrote
	}
	return false // not reached: Check validated the algorithm
}

// windowOf returns the window state in st (nil = no state).
func windowOf(st *memoryState) *windowState {
	if st == nil {
		return nil
	}
	return &st.window
}

// The algorithms' numbers in a memoryKey.
const (
	fixedWindowN byte = iota + 1
	slidingWindowN
	tokenBucketN
	gcraN
)

// memoryAlg returns a's number in a memoryKey.
func memoryAlg(a Algorithm) byte {
	switch a {
	case FixedWindow:
		return fixedWindowN
	case SlidingWindow:
		return slidingWindowN
	case TokenBucket:
		return tokenBucketN
	case GCRA:
		return gcraN
	}
	return 0
}

// set sets lk to the numbers of r's key. rate is r.Limit.Refill() for a
// token bucket. (It sets lk in place: a limitKey returned by value is
// written in words and read back in wider ones, which stalls the CPU.)
func (lk *limitKey) set(r *Request, rate float64) {
	*lk = limitKey{alg: memoryAlg(r.Limit.Algorithm)}
	if r.Key.Name == "" {
		lk.limit, lk.windowMS = r.Limit.Limit, r.Limit.Window.Milliseconds()
		if lk.alg == tokenBucketN {
			lk.refill = rate
		}
	}
	if lk.alg == fixedWindowN || lk.alg == slidingWindowN {
		lk.windowUS = r.Limit.Window.Microseconds()
	}
}

// keyHash returns the hash of the key of key and lk, given idHash, the hash
// of its (scope, identifier). Every part that a client chooses is hashed
// with the store's random seed, so no one can pick keys that share a hash
// on purpose.
func (s *MemoryStore) keyHash(key *Key, lk *limitKey, idHash uint64) uint64 {
	var h uint64 // the hash of the parts that name the limit
	if key.Name != "" {
		h = maphash.String(s.seed, key.Name)
	} else {
		h = fmix(uint64(lk.limit)^s.salt[0]) ^ fmix(uint64(lk.windowMS)^s.salt[1]) ^ fmix(math.Float64bits(lk.refill)^s.salt[2])
	}
	if lk.windowUS != 0 {
		h ^= fmix(uint64(lk.windowUS) ^ s.salt[1] ^ s.salt[2])
	}
	return idHash ^ h ^ uint64(lk.alg)
}

// identityHash is the hash of (scope, identifier).
func (s *MemoryStore) identityHash(scope, identifier string) uint64 {
	return maphash.String(s.seed, scope)*0x9e3779b97f4a7c15 ^ maphash.String(s.seed, identifier)
}

// fmix is MurmurHash3's 64-bit finalizer: each bit of x changes about half
// the bits of the result.
func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}

// shard returns the shard that holds every limit of the (scope,
// identifier) of idHash.
func (s *MemoryStore) shard(idHash uint64) *memoryShard {
	return &s.shards[idHash%uint64(len(s.shards))]
}

// find returns the entry of the key of key and lk, of hash h, or nil.
// Call it with sh.mu held.
func (sh *memoryShard) find(key *Key, lk *limitKey, h uint64) *memoryEntry {
	e := sh.states[h]
	for e != nil && !e.key.is(key, lk) {
		e = e.next
	}
	return e
}

// entry returns e, the entry find returned for the key of key and lk, of
// hash h; or when e is nil, a new entry for that key, linked into its
// chain. Call it with sh.mu held.
func (sh *memoryShard) entry(e *memoryEntry, key *Key, lk *limitKey, h uint64) *memoryEntry {
	if e == nil {
		e = &memoryEntry{key: memoryKeyOf(key, lk), next: sh.states[h]}
		sh.states[h] = e
	}
	return e
}

// drop unlinks, from the chain head of hash h, the entries for which gone
// is true, and returns how many of those were alive at nowUS. A chain it
// leaves whole is not written. Call it with sh.mu held.
func (sh *memoryShard) drop(h uint64, head *memoryEntry, nowUS int64, gone func(*memoryEntry) bool) int {
	n, changed := 0, false
	for link := &head; *link != nil; {
		e := *link
		if !gone(e) {
			link = &e.next
			continue
		}
		if e.state.expiresUS > nowUS {
			n++
		}
		*link, changed = e.next, true
	}
	switch {
	case !changed:
	case head == nil:
		delete(sh.states, h)
	default:
		sh.states[h] = head
	}
	return n
}

// at returns the moment the shard decides at, given the batch's clock
// reading nowUS: nowUS, or the shard's latest moment if that is later. The
// clock is read once per batch before any lock is taken, so a batch that
// waited for the lock may hold an older reading than one that went first;
// deciding it at its own reading would apply an old window to a newer
// window's state (and overwrite it). at keeps each shard's time from
// running backwards, as it would if the clock were read under the lock.
// Call it with sh.mu held.
func (sh *memoryShard) at(nowUS int64) int64 {
	if nowUS < sh.lastUS {
		return sh.lastUS
	}
	sh.lastUS = nowUS
	return nowUS
}

// alive returns the state of e when it is still alive at nowUS, else nil.
func alive(e *memoryEntry, nowUS int64) *memoryState {
	if e == nil || e.state.expiresUS <= nowUS {
		return nil
	}
	return &e.state
}

// Reset forgets the state of (scope, identifier), all algorithms or only alg.
// It looks through the one shard that holds them (1/Shards of all state,
// like one shard of a Sweep), under its lock.
func (s *MemoryStore) Reset(ctx context.Context, scope, identifier string, alg Algorithm) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if alg != "" {
		if _, err := ParseAlgorithm(string(alg)); err != nil {
			return 0, err
		}
	}
	nowUS := s.nowUS()
	sh := s.shard(s.identityHash(scope, identifier))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowUS = sh.at(nowUS)
	n, an := 0, memoryAlg(alg) // 0 for all algorithms
	for h, head := range sh.states {
		n += sh.drop(h, head, nowUS, func(e *memoryEntry) bool {
			return e.key.scope == scope && e.key.identifier == identifier && (an == 0 || e.key.alg == an)
		})
	}
	return n, nil
}

// Clear forgets the state of each request's key and limit, and returns how
// many were alive.
func (s *MemoryStore) Clear(ctx context.Context, reqs []Request) (int, error) {
	if err := validateBatch(reqs); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	nowUS := s.nowUS()
	n := 0
	for i := range reqs {
		var p spot
		key := &reqs[i].Key
		s.place(&reqs[i], &p)
		p.sh.mu.Lock()
		at := p.sh.at(nowUS)
		n += p.sh.drop(p.h, p.sh.states[p.h], at, func(e *memoryEntry) bool { return e.key.is(key, &p.lk) })
		p.sh.mu.Unlock()
	}
	return n, nil
}

// Run sweeps expired state every SweepEvery until ctx ends.
func (s *MemoryStore) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep drops every expired state now.
func (s *MemoryStore) Sweep() {
	nowUS := s.nowUS()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		at := sh.at(nowUS)
		for h, head := range sh.states {
			sh.drop(h, head, at, func(e *memoryEntry) bool { return e.state.expiresUS <= at })
		}
		sh.mu.Unlock()
	}
}

// Len returns how many limit states are held, expired or not (for tests and
// memory accounting).
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.states {
			for ; e != nil; e = e.next {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
