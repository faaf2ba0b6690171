package algorithms

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
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
// Redis store. Expired state is dropped when touched and by Run's sweeps, so
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
		s.shards[i].nextHoldUS = math.MaxInt64
	}
	return s
}

// Check decides each request against this process's state. The
// all-or-nothing requests of a batch (see checkTied) are decided as one.
func (s *MemoryStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := ValidateBatch(reqs); err != nil {
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
	if Tied(reqs) {
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
		if at >= sh.nextHoldUS {
			sh.expireHolds(at)
		}
		out[i].Counted = sh.decide(&p, r, at, true, &out[i])
		s.keepHold(r, &p, at, &out[i])
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
		if sh := &s.shards[i]; sh.at(nowUS) >= sh.nextHoldUS {
			sh.expireHolds(nowUS)
		}
	}
	defer func() {
		for i := range reqs {
			s.keepHold(&reqs[i], &ps[i].spot, nowUS, &out[i])
		}
	}()
	voided := false
	for i := range reqs {
		r, p := &reqs[i], &ps[i]
		mayWrite := !(voided && Uncounts(r))
		if e := p.sh.find(&r.Key, &p.lk, p.h); mayWrite && e != nil {
			p.old, p.had = e.state, true
		}
		p.wrote = p.sh.decide(&p.spot, r, nowUS, mayWrite, &out[i]) && mayWrite
		out[i].Counted = p.wrote
		if Voids(r, &out[i]) && !voided {
			voided = true
			// Last first: a key the group wrote twice gets back the state
			// from before its first write.
			for j := i - 1; j >= 0; j-- {
				if q := &ps[j]; q.wrote && Uncounts(&reqs[j]) {
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
		if r := &reqs[i]; Uncounts(r) && out[i].Allowed {
			p := &ps[i]
			peek := *r
			peek.Hits = 0
			out[i] = Decision{}
			p.sh.decide(&p.spot, &peek, nowUS, false, &out[i])
			out[i].Allowed = true
		}
	}
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
	sh.clearHolds(nowUS, func(h *memoryHold) bool {
		return h.req.Key.Scope == scope && h.req.Key.Identifier == identifier && (an == 0 || h.p.lk.alg == an)
	})
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
	if err := ValidateBatch(reqs); err != nil {
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
		p.sh.clearHolds(at, func(h *memoryHold) bool { return h.p.lk == p.lk && h.req.Key == *key })
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
		if at >= sh.nextHoldUS {
			sh.expireHolds(at)
		}
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
