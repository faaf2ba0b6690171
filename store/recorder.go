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
	mu     sync.Mutex
	counts map[usageKey]*usageCount
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
		r.shards[i].counts = map[usageKey]*usageCount{}
	}
	return r
}

func (r *UsageRecorder) shard(clientID string) *recorderShard {
	return &r.shards[maphash.String(r.seed, clientID)%recorderShards]
}

// Record counts one decision. It takes one short, sharded lock and never
// touches the database. Calls without a client id are ignored; an
// algorithm name the database would refuse is counted under no algorithm.
func (r *UsageRecorder) Record(clientID, algorithm string, allowed bool) {
	if clientID == "" {
		return
	}
	if len(algorithm) > maxNameLen || !cleanText(algorithm) {
		algorithm = ""
	}
	s := r.shard(clientID)
	k := usageKey{clientID, algorithm}
	s.mu.Lock()
	c := s.counts[k]
	if c == nil {
		c = &usageCount{}
		s.counts[k] = c
	}
	if allowed {
		c.allowed++
	} else {
		c.rejected++
	}
	s.mu.Unlock()
}

// Run flushes every `every` until ctx ends, then flushes once more with its
// own 5-second deadline and returns nil. A failed flush keeps its counts for
// the next one.
func (r *UsageRecorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
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

	taken := make([]map[usageKey]*usageCount, recorderShards)
	var deltas []Usage
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if len(s.counts) > 0 {
			taken[i] = s.counts
			s.counts = map[usageKey]*usageCount{}
		}
		s.mu.Unlock()
		for k, c := range taken[i] {
			deltas = append(deltas, usageDelta(k, *c))
		}
	}
	if len(deltas) == 0 {
		return nil
	}
	err := r.db.AddUsage(ctx, deltas)
	if err == nil {
		return nil
	}
	for i, counts := range taken {
		if counts == nil {
			continue
		}
		s := &r.shards[i]
		s.mu.Lock()
		for k, c := range counts {
			if cur := s.counts[k]; cur != nil {
				cur.allowed += c.allowed
				cur.rejected += c.rejected
			} else {
				s.counts[k] = c
			}
		}
		s.mu.Unlock()
	}
	return fmt.Errorf("flush %d usage counts: %w", len(deltas), err)
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
