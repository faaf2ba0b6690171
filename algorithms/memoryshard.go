package algorithms

import "sync"

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
	// holds are the holds of the shard's identifiers, by holdName (nil
	// until one is made); nextHoldUS is the earliest moment one of them
	// expires or is forgotten (memoryhold.go).
	holds      map[string]*memoryHold
	nextHoldUS int64
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

// windowOf returns the window state in st (nil = no state).
func windowOf(st *memoryState) *windowState {
	if st == nil {
		return nil
	}
	return &st.window
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
