package store

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"
)

// recorderShards spreads Record's locking so goroutines on different
// clients rarely meet on one mutex.
const recorderShards = 32

// MaxIdentifiersPerFlush bounds the identifiers of one client that a
// UsageRecorder counts per identifier between two flushes (so, with
// serve's flush every second, per second and replica): decisions of further
// identifiers still count in the client's totals, not per identifier. It
// bounds the recorder's memory and the rows one flush writes.
const MaxIdentifiersPerFlush = 1000

// pruneEvery is how often Run deletes the counts of identifiers unseen for
// IdentifierRetention.
const pruneEvery = time.Hour

// UsageRecorder counts /check decisions in memory and adds them to the
// database in batches, so the hot path never waits on a write.
type UsageRecorder struct {
	db    *DB
	every time.Duration
	log   *slog.Logger
	seed  maphash.Seed

	shards [recorderShards]recorderShard

	// flushMu is held by a flush from taking the pending counts until they
	// are in the database (or merged back), and by Usage while it reads, so
	// Usage never counts a batch twice or misses one in flight.
	flushMu sync.RWMutex
}

type recorderShard struct {
	mu sync.Mutex
	pending
	// tracked counts each client's keys in idents, for MaxIdentifiersPerFlush.
	tracked map[string]int
}

// pending is what a shard counted since the last flush.
type pending struct {
	counts map[usageKey]*usageCount
	idents map[identifierKey]*usageCount
}

// take empties the shard and returns what it held. s.mu must be held.
func (s *recorderShard) take() pending {
	t := s.pending
	s.counts = map[usageKey]*usageCount{}
	s.idents = map[identifierKey]*usageCount{}
	s.tracked = map[string]int{}
	return t
}

// merge adds t's counts (a failed flush's) back into s. s.mu must be held.
func (s *recorderShard) merge(t pending) {
	addCounts(s.counts, t.counts, nil)
	// A put-back may go over MaxIdentifiersPerFlush once; it is what was
	// already counted, so nothing is dropped.
	addCounts(s.idents, t.idents, func(k identifierKey) { s.tracked[k.clientID]++ })
}

// addCounts adds from's counts into into; added is told of each key new there.
func addCounts[K comparable](into, from map[K]*usageCount, added func(K)) {
	for k, c := range from {
		if cur := into[k]; cur != nil {
			cur.allowed += c.allowed
			cur.rejected += c.rejected
			continue
		}
		into[k] = c
		if added != nil {
			added(k)
		}
	}
}

// NewUsageRecorder returns a recorder that Run flushes to db every `every`
// (a non-positive value means 5s).
func NewUsageRecorder(db *DB, every time.Duration, log *slog.Logger) *UsageRecorder {
	if every <= 0 {
		every = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &UsageRecorder{db: db, every: every, log: log, seed: maphash.MakeSeed()}
	for i := range r.shards {
		r.shards[i].take()
	}
	return r
}

func (r *UsageRecorder) shard(clientID string) *recorderShard {
	return &r.shards[maphash.String(r.seed, clientID)%recorderShards]
}

// Record counts one decision of identifier. It takes one short, sharded
// lock and never touches the database. Calls without a client id are
// ignored; an algorithm name the database would refuse is counted under no
// algorithm; an identifier that is empty or not an exemption's kind of text,
// or one past MaxIdentifiersPerFlush, counts in the totals only.
func (r *UsageRecorder) Record(clientID, identifier, algorithm string, allowed bool) {
	if clientID == "" {
		return
	}
	if len(algorithm) > maxNameLen || !cleanText(algorithm) {
		algorithm = ""
	}
	s := r.shard(clientID)
	k := usageKey{clientID, algorithm}
	s.mu.Lock()
	defer s.mu.Unlock()
	count(s.counts, k, allowed)
	if identifier == "" {
		return
	}
	ik := identifierKey{clientID, identifier}
	if s.idents[ik] == nil {
		if s.tracked[clientID] >= MaxIdentifiersPerFlush || !trackedIdentifier(identifier) {
			return
		}
		s.tracked[clientID]++
	}
	count(s.idents, ik, allowed)
}

// count adds one decision to m[k].
func count[K comparable](m map[K]*usageCount, k K, allowed bool) {
	c := m[k]
	if c == nil {
		c = &usageCount{}
		m[k] = c
	}
	if allowed {
		c.allowed++
	} else {
		c.rejected++
	}
}

// Run flushes every `every` until ctx ends, then flushes once more with its
// own 5-second deadline and returns nil. A failed flush keeps its counts for
// the next one. Every hour (and when it starts) it also deletes the counts
// of identifiers unseen for IdentifierRetention.
func (r *UsageRecorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	var pruned time.Time
	for {
		if now := r.db.now(); now.Sub(pruned) >= pruneEvery {
			pruned = now
			if _, err := r.db.PruneIdentifierUsage(ctx, now.Add(-IdentifierRetention)); err != nil && ctx.Err() == nil {
				r.log.Warn("prune identifier usage; will retry", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.Flush(final); err != nil {
				r.log.Error("flush usage counts on shutdown; counts not yet written are lost", "err", err)
			}
			return nil
		case <-t.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("flush usage counts; will retry", "err", err)
			}
		}
	}
}

// Flush writes the pending counts to the database now. When the write
// fails, the counts are put back (added to whatever was recorded meanwhile)
// and the error is returned.
func (r *UsageRecorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()

	taken := make([]pending, recorderShards)
	var (
		deltas []Usage
		idents []IdentifierUsage
	)
	seen := r.db.now()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		taken[i] = s.take()
		s.mu.Unlock()
		for k, c := range taken[i].counts {
			deltas = append(deltas, usageDelta(k, *c))
		}
		for k, c := range taken[i].idents {
			idents = append(idents, IdentifierUsage{ClientID: k.clientID, Identifier: k.identifier, Allowed: c.allowed, Rejected: c.rejected, LastSeen: seen})
		}
	}
	if len(deltas) == 0 && len(idents) == 0 {
		return nil
	}
	err := r.db.addUsage(ctx, deltas, idents)
	if err == nil {
		return nil
	}
	for i := range taken {
		s := &r.shards[i]
		s.mu.Lock()
		s.merge(taken[i])
		s.mu.Unlock()
	}
	return fmt.Errorf("flush %d usage counts: %w", len(deltas)+len(idents), err)
}

func usageDelta(k usageKey, c usageCount) Usage {
	u := Usage{ClientID: k.clientID, Allowed: c.allowed, Rejected: c.rejected, TotalChecks: c.allowed + c.rejected}
	if k.algorithm != "" {
		u.ByAlgorithm = map[string]int64{k.algorithm: c.allowed + c.rejected}
	}
	return u
}

// Usage returns the client's counts: those in the database plus those
// recorded here and not yet flushed.
func (r *UsageRecorder) Usage(ctx context.Context, clientID string) (Usage, error) {
	r.flushMu.RLock()
	defer r.flushMu.RUnlock()
	u, err := r.db.Usage(ctx, clientID)
	if err != nil {
		return Usage{}, err
	}
	s := r.shard(clientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.counts {
		if k.clientID == clientID {
			u.add(k.algorithm, *c)
		}
	}
	return u, nil
}

// TopIdentifiers returns the client's n most checked identifiers, as
// DB.TopIdentifiers orders them, counting those in the database and those
// recorded here and not yet flushed (whose LastSeen is now). n is capped at
// MaxTopIdentifiers.
func (r *UsageRecorder) TopIdentifiers(ctx context.Context, clientID string, n int) ([]IdentifierUsage, error) {
	n = min(n, MaxTopIdentifiers)
	if n <= 0 {
		return []IdentifierUsage{}, nil
	}
	r.flushMu.RLock()
	defer r.flushMu.RUnlock()
	top, err := r.db.TopIdentifiers(ctx, clientID, n)
	if err != nil {
		return nil, err
	}
	unflushed := map[string]usageCount{}
	s := r.shard(clientID)
	s.mu.Lock()
	for k, c := range s.idents {
		if k.clientID == clientID {
			unflushed[k.identifier] = *c
		}
	}
	s.mu.Unlock()
	if len(unflushed) == 0 {
		return top, nil
	}
	// An identifier with unflushed counts may be missing from the stored top
	// n: read its stored counts, add the pending ones, and rank again. One
	// without is ranked by its stored counts, which the top n already holds.
	names := make([]string, 0, len(unflushed))
	for id := range unflushed {
		names = append(names, id)
	}
	stored, err := r.db.identifierUsage(ctx, clientID, names)
	if err != nil {
		return nil, err
	}
	all := map[string]IdentifierUsage{}
	for _, list := range [][]IdentifierUsage{top, stored} {
		for _, u := range list {
			all[u.Identifier] = u
		}
	}
	now := r.db.now().UTC().Truncate(time.Second)
	for id, c := range unflushed {
		u := all[id]
		u.ClientID, u.Identifier = clientID, id
		u.Allowed += c.allowed
		u.Rejected += c.rejected
		u.LastSeen = now
		all[id] = u
	}
	merged := make([]IdentifierUsage, 0, len(all))
	for _, u := range all {
		merged = append(merged, u)
	}
	sortIdentifierUsage(merged)
	return merged[:min(n, len(merged))], nil
}
