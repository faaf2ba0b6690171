package algorithms

import (
	"context"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryOptions configures a MemoryStore. Every field is optional.
type MemoryOptions struct {
	// Now is the clock. Default time.Now.
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
type MemoryStore struct {
	now        func() time.Time
	seed       maphash.Seed
	shards     []memoryShard
	sweepEvery time.Duration
}

type memoryShard struct {
	index  int32 // in MemoryStore.shards: the order in which shards are locked together
	mu     sync.Mutex
	idents map[identity]map[string]*memoryState
}

type identity struct{ scope, identifier string }

// memoryState is one limit's state; expiresUS is when it stops mattering.
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
	for i := range s.shards {
		s.shards[i].idents = make(map[identity]map[string]*memoryState)
		s.shards[i].index = int32(i)
	}
	return s
}

func (s *MemoryStore) shard(id identity) *memoryShard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(id.scope)
	h.WriteByte(0)
	h.WriteString(id.identifier)
	return &s.shards[h.Sum64()%uint64(len(s.shards))]
}

// Check decides each request against this process's state. The
// all-or-nothing requests of the batch are decided with every shard they
// touch locked, so that the group counts as one: at its first request over
// the limit, what it counted is put back.
func (s *MemoryStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]Decision, len(reqs))
	if !allOrNothing(reqs) {
		for i := range reqs {
			sh, id := s.shardOf(&reqs[i])
			sh.mu.Lock()
			out[i], _ = s.decide(sh, id, &reqs[i], s.now().UnixMicro(), true)
			sh.mu.Unlock()
		}
		return out, nil
	}
	// Lock the shards in index order, each once.
	shards := make([]int, 0, len(reqs))
	for i := range reqs {
		sh, _ := s.shardOf(&reqs[i])
		shards = append(shards, int(sh.index))
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
	nowUS := s.now().UnixMicro()
	var undo []func()
	voided := false
	for i := range reqs {
		r := &reqs[i]
		sh, id := s.shardOf(r)
		var put func()
		out[i], put = s.decide(sh, id, r, nowUS, r.AlwaysCount || !(r.AllOrNothing && voided))
		switch {
		case !r.AllOrNothing:
		case !out[i].Allowed && !voided:
			voided = true
			for _, f := range undo {
				f()
			}
		case put != nil && !r.AlwaysCount && !voided:
			undo = append(undo, put)
		}
	}
	if voided {
		// Within their limits but not counted: say what the state is.
		for i := range reqs {
			if r := &reqs[i]; r.AllOrNothing && !r.AlwaysCount && out[i].Allowed {
				sh, id := s.shardOf(r)
				peek := *r
				peek.Hits = 0
				d, _ := s.decide(sh, id, &peek, nowUS, false)
				d.Allowed = true
				out[i] = d
			}
		}
	}
	return out, nil
}

func (s *MemoryStore) shardOf(r *Request) (*memoryShard, identity) {
	id := identity{r.Key.Scope, r.Key.Identifier}
	return s.shard(id), id
}

// decide decides r on sh, locked by the caller, and counts it unless write
// is false. When it wrote, it returns what puts the state back.
func (s *MemoryStore) decide(sh *memoryShard, id identity, r *Request, nowUS int64, write bool) (Decision, func()) {
	member := stateMember(r)
	states := sh.idents[id]
	st := states[member]
	if st != nil && st.expiresUS <= nowUS {
		st = nil
	}
	var o outcome
	next := &memoryState{}
	switch r.Limit.Algorithm {
	case FixedWindow, SlidingWindow:
		var prev *windowState
		if st != nil {
			prev = &st.window
		}
		decide := decideFixed
		if r.Limit.Algorithm == SlidingWindow {
			decide = decideSliding
		}
		next.window, o = decide(prev, nowUS, r.Limit.Window.Microseconds(), r.Limit.Limit, r.Hits, r.AlwaysCount)
	case TokenBucket:
		var prev *tokenState
		if st != nil {
			prev = &st.bucket
		}
		next.bucket, o = decideToken(prev, nowUS, r.Limit.Limit, r.Limit.Refill(), r.Hits, r.AlwaysCount)
	case GCRA:
		var prev *gcraState
		if st != nil {
			prev = &st.cell
		}
		next.cell, o = decideGCRA(prev, nowUS, r.Limit.Window.Microseconds(), r.Limit.Limit, r.Hits, r.AlwaysCount)
	}
	var put func()
	if o.wrote && write {
		next.expiresUS = nowUS + o.ttlUS
		if states == nil {
			states = make(map[string]*memoryState)
			sh.idents[id] = states
		}
		old, had := states[member]
		states[member] = next
		put = func() {
			if had {
				states[member] = old
			} else {
				delete(states, member)
			}
		}
	}
	d := o.decision(r.Limit.Limit, nowUS)
	d.Counted = o.wrote && write
	return d, put
}

// Reset forgets the state of (scope, identifier), all algorithms or only alg.
func (s *MemoryStore) Reset(ctx context.Context, scope, identifier string, alg Algorithm) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if alg != "" {
		if _, err := ParseAlgorithm(string(alg)); err != nil {
			return 0, err
		}
	}
	id := identity{scope, identifier}
	code := algCode(alg)
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowUS := s.now().UnixMicro()
	n := 0
	for member, st := range sh.idents[id] {
		if code != "" && !strings.HasPrefix(member, code+":") {
			continue
		}
		if st.expiresUS > nowUS {
			n++
		}
		delete(sh.idents[id], member)
	}
	if len(sh.idents[id]) == 0 {
		delete(sh.idents, id)
	}
	return n, nil
}

// Clear forgets the state of each request's key and limit.
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
		r := &reqs[i]
		id := identity{r.Key.Scope, r.Key.Identifier}
		member := stateMember(r)
		sh := s.shard(id)
		sh.mu.Lock()
		if st, ok := sh.idents[id][member]; ok {
			if st.expiresUS > nowUS {
				n++
			}
			delete(sh.idents[id], member)
			if len(sh.idents[id]) == 0 {
				delete(sh.idents, id)
			}
		}
		sh.mu.Unlock()
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
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		nowUS := s.now().UnixMicro()
		for id, states := range sh.idents {
			for member, st := range states {
				if st.expiresUS <= nowUS {
					delete(states, member)
				}
			}
			if len(states) == 0 {
				delete(sh.idents, id)
			}
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
		for _, states := range sh.idents {
			n += len(states)
		}
		sh.mu.Unlock()
	}
	return n
}
