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
	// Now is the clock, read once per batch. Default time.Now. The store
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
	now        func() time.Time
	seed       maphash.Seed
	salt       [3]uint64 // random, from seed: keys the hash of a limit's numbers
	shards     []memoryShard
	sweepEvery time.Duration
}

type memoryShard struct {
	mu sync.Mutex
	// states holds each limit's entry under the hash keyOf gives its key;
	// entries whose keys share a hash are chained.
	states map[uint64]*memoryEntry
	// lastUS is the latest moment this shard decided at (see at).
	lastUS int64
	// index is the shard's place in MemoryStore.shards: the order in which
	// an all-or-nothing batch locks several.
	index int32
	// Pad to a cache line of its own, so goroutines working on
	// neighbouring shards do not contend on one.
	_ [36]byte
}

// memoryKey names one limit's state on one identifier: the same parts, with
// the same meaning, as RedisStore's key (stateKey). A named limit is its
// algorithm and name (limit, windowMS and refill stay zero); an unnamed one
// is its algorithm, limit, window in whole ms and, for a token bucket, its
// refill rate (name stays empty). A window algorithm's key also has its
// window in µs, named or not.
type memoryKey struct {
	scope, identifier, name   string
	alg                       Algorithm
	limit, windowMS, windowUS int64
	refill                    float64
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
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Shards <= 0 {
		opts.Shards = 64
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = 10 * time.Second
	}
	s := &MemoryStore{now: opts.Now, seed: maphash.MakeSeed(), sweepEvery: opts.SweepEvery, shards: make([]memoryShard, opts.Shards)}
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
	nowUS := s.now().UnixMicro()
	if allOrNothing(reqs) {
		s.checkTied(reqs, out, nowUS)
		return out, nil
	}
	for i := range reqs {
		r := &reqs[i]
		p := s.place(r)
		sh := p.sh
		sh.mu.Lock()
		at := sh.at(nowUS)
		e := sh.find(&p.k, p.h) // nil, alive or expired
		next, o := decideMemory(alive(e, at), r, p.rate, at)
		if o.wrote {
			next.expiresUS = at + o.ttlUS
			sh.put(e, &p.k, p.h, next)
		}
		sh.mu.Unlock()
		o.writeTo(&out[i], r.Limit.Limit, at)
		out[i].Counted = o.wrote
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
		ps[i].spot = s.place(&reqs[i])
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
		e := p.sh.find(&p.k, p.h)
		next, o := decideMemory(alive(e, nowUS), r, p.rate, nowUS)
		write := o.wrote && (r.AlwaysCount || !(r.AllOrNothing && voided))
		if write {
			if e != nil {
				p.old, p.had = e.state, true
			}
			next.expiresUS = nowUS + o.ttlUS
			p.sh.put(e, &p.k, p.h, next)
			p.wrote = true
		}
		o.writeTo(&out[i], r.Limit.Limit, nowUS)
		out[i].Counted = write
		if r.AllOrNothing && !o.allowed && !voided {
			voided = true
			for j := range i {
				if q := &ps[j]; q.wrote && reqs[j].AllOrNothing && !reqs[j].AlwaysCount {
					q.putBack(nowUS)
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
			_, o := decideMemory(alive(p.sh.find(&p.k, p.h), nowUS), &peek, p.rate, nowUS)
			out[i] = Decision{}
			o.writeTo(&out[i], r.Limit.Limit, nowUS)
			out[i].Allowed = true
		}
	}
}

// spot is where a request's state lives: its key, the key's hash and
// shard, and a token bucket's refill rate, worked out once.
type spot struct {
	k    memoryKey
	h    uint64
	sh   *memoryShard
	rate float64
}

// place finds r's spot.
func (s *MemoryStore) place(r *Request) (p spot) {
	if r.Limit.Algorithm == TokenBucket {
		p.rate = r.Limit.Refill()
	}
	var idHash uint64
	p.k, idHash, p.h = s.keyOf(r, p.rate)
	p.sh = s.shard(idHash)
	return p
}

// placed is a request's spot in checkTied, and what its state was before
// the request wrote it.
type placed struct {
	spot
	old   memoryState
	had   bool
	wrote bool
}

// putBack restores the state p's request wrote over (or removes the one
// it made). Call it with p.sh.mu held.
func (p *placed) putBack(nowUS int64) {
	e := p.sh.find(&p.k, p.h)
	if p.had {
		e.state = p.old
		return
	}
	p.sh.drop(p.h, p.sh.states[p.h], nowUS, func(x *memoryEntry) bool { return x == e })
}

// decideMemory applies r's algorithm to st (nil = no state) at nowUS and
// returns the state to write when o.wrote, and the outcome. It writes
// nothing itself. rate is r.Limit.Refill() for a token bucket.
func decideMemory(st *memoryState, r *Request, rate float64, nowUS int64) (next memoryState, o outcome) {
	l := &r.Limit
	switch l.Algorithm {
	case FixedWindow:
		next.window, o = decideFixed(windowOf(st), nowUS, l.Window.Microseconds(), l.Limit, r.Hits, r.AlwaysCount)
	case SlidingWindow:
		next.window, o = decideSliding(windowOf(st), nowUS, l.Window.Microseconds(), l.Limit, r.Hits, r.AlwaysCount)
	case TokenBucket:
		var prev *tokenState
		if st != nil {
			prev = &st.bucket
		}
		next.bucket, o = decideToken(prev, nowUS, l.Limit, rate, r.Hits, r.AlwaysCount)
	case GCRA:
		var prev *gcraState
		if st != nil {
			prev = &st.cell
		}
		next.cell, o = decideGCRA(prev, nowUS, l.Window.Microseconds(), l.Limit, r.Hits, r.AlwaysCount)
	}
	return next, o
}

// windowOf returns the window state in st (nil = no state).
func windowOf(st *memoryState) *windowState {
	if st == nil {
		return nil
	}
	return &st.window
}

// keyOf returns r's key, the hash of its (scope, identifier), which picks
// its shard, and the hash of the whole key. rate is r.Limit.Refill() for a
// token bucket. Every part that a client chooses is hashed with the store's
// random seed, so no one can pick keys that share a hash on purpose.
func (s *MemoryStore) keyOf(r *Request, rate float64) (k memoryKey, idHash, hash uint64) {
	k = memoryKey{scope: r.Key.Scope, identifier: r.Key.Identifier, alg: r.Limit.Algorithm}
	idHash = s.identityHash(k.scope, k.identifier)
	var lh uint64 // the hash of the parts that name the limit
	if r.Key.Name != "" {
		k.name = r.Key.Name
		lh = maphash.String(s.seed, k.name)
	} else {
		k.limit, k.windowMS = r.Limit.Limit, r.Limit.Window.Milliseconds()
		if k.alg == TokenBucket {
			k.refill = rate
		}
		lh = fmix(uint64(k.limit)^s.salt[0]) ^ fmix(uint64(k.windowMS)^s.salt[1]) ^ fmix(math.Float64bits(k.refill)^s.salt[2])
	}
	if k.alg == FixedWindow || k.alg == SlidingWindow {
		k.windowUS = r.Limit.Window.Microseconds()
		lh ^= fmix(uint64(k.windowUS) ^ s.salt[1] ^ s.salt[2])
	}
	return k, idHash, idHash ^ lh ^ uint64(algNumber(k.alg))
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

// find returns the entry of k, of hash h, or nil. Call it with sh.mu held.
func (sh *memoryShard) find(k *memoryKey, h uint64) *memoryEntry {
	e := sh.states[h]
	for e != nil && e.key != *k {
		e = e.next
	}
	return e
}

// put stores next as the state of k, of hash h, in e: the entry find
// returned, or nil for a new one. Call it with sh.mu held.
func (sh *memoryShard) put(e *memoryEntry, k *memoryKey, h uint64, next memoryState) {
	if e == nil {
		e = &memoryEntry{key: *k, next: sh.states[h]}
		sh.states[h] = e
	}
	e.state = next
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
	nowUS := s.now().UnixMicro()
	sh := s.shard(s.identityHash(scope, identifier))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowUS = sh.at(nowUS)
	n := 0
	for h, head := range sh.states {
		n += sh.drop(h, head, nowUS, func(e *memoryEntry) bool {
			return e.key.scope == scope && e.key.identifier == identifier && (alg == "" || e.key.alg == alg)
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
	nowUS := s.now().UnixMicro()
	n := 0
	for i := range reqs {
		p := s.place(&reqs[i])
		p.sh.mu.Lock()
		at := p.sh.at(nowUS)
		n += p.sh.drop(p.h, p.sh.states[p.h], at, func(e *memoryEntry) bool { return e.key == p.k })
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
	nowUS := s.now().UnixMicro()
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
