// Package overlimit answers, without the store behind it, what that store
// has just rejected: the reference service's local cache
// (LOCAL_CACHE_SIZE_IN_BYTES), in front of the Redis engine on the Envoy
// path. It wraps any algorithms.Store and imports no Redis.
package overlimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
)

// Cache answers, without the backend, requests for a key that the
// backend has just rejected, until the moment the backend said the same
// request could next be admitted (the reference service's local cache,
// LOCAL_CACHE_SIZE_IN_BYTES).
//
// It cannot change a decision. A rejected request consumes nothing, so
// until its RetryAfter has passed the state of its key only moves further
// from admitting it: the window's count only grows, the sliding window's
// weighted count only falls as time passes (the retry time is when it has
// fallen enough), the bucket only refills by then, and GCRA's TAT only
// comes closer to now by then. A request of at least as
// many hits on the same key and limit before then would be rejected by the
// backend too. The time is taken before the backend call was sent, so the
// cached moment is early by the round trip, never late. Decisions made by
// the failure policy are never cached, nor those of approximate limits
// (decided from memory anyway; a refusal over a replica's share may end at
// its next sync); a limit changed by a config reload is another cache key.
//
// Two things it does not see: a Reset made through another replica (so it
// wraps only the Envoy path, whose domain-scoped counters no REST call
// resets), and counters lost by Redis (a flush, a restart without
// persistence): it goes on rejecting what the key's limit says must be
// rejected in that window, where Redis would have started again from zero.
type Cache struct {
	next     algorithms.Store
	seed     maphash.Seed
	stripes  [numStripes]stripe
	maxBytes int // per stripe
	now      func() time.Time
	hits     prometheus.Counter
}

const numStripes = 64

type stripe struct {
	mu    sync.Mutex
	m     map[cacheKey]cacheEntry
	bytes int
}

type cacheKey struct {
	key   algorithms.Key
	limit algorithms.Limit
}

type cacheEntry struct {
	hits    int64     // the rejected request's cost: requests of at least this much are rejected
	until   time.Time // when that request could first be admitted
	resetAt time.Time // when the state is fresh again
}

// entryOverhead approximates a map entry's bytes beside its strings.
const entryOverhead = 160

// Options configures an Cache.
type Options struct {
	// MaxBytes bounds the cache's memory (approximately: key strings plus a
	// fixed overhead per entry). Required, > 0.
	MaxBytes int
	// Registerer receives the cache's metrics. Optional.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// New wraps next.
func New(next algorithms.Store, opts Options) (*Cache, error) {
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("over-limit cache: size %d must be > 0", opts.MaxBytes)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cache{
		next: next, seed: maphash.MakeSeed(), now: opts.Now,
		maxBytes: max(opts.MaxBytes/numStripes, entryOverhead),
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_overlimit_cache_hits_total",
			Help: "Requests rejected by the local over-limit cache without a backend call (LOCAL_CACHE_SIZE_IN_BYTES).",
		}),
	}
	for i := range c.stripes {
		c.stripes[i].m = map[cacheKey]cacheEntry{}
	}
	if opts.Registerer != nil {
		size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "throttle_overlimit_cache_bytes",
			Help: "Approximate memory held by the local over-limit cache.",
		}, func() float64 { return float64(c.bytes()) })
		for _, m := range []prometheus.Collector{c.hits, size} {
			if err := opts.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("register over-limit cache metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Check answers the requests the cache knows to be over their limit and
// sends the others, in one batch, to the wrapped store.
func (c *Cache) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	now := c.now()
	var out []algorithms.Decision // nil until a request is answered here
	for i, r := range reqs {
		if r.Hits <= 0 || r.Hits > algorithms.MaxLimit || r.AlwaysCount || r.Limit.Accuracy == algorithms.Approximate {
			continue // a peek, invalid, counted anyway, or decided from memory: the store answers
		}
		e, ok := c.lookup(r, now)
		if !ok {
			continue
		}
		if out == nil {
			out = make([]algorithms.Decision, len(reqs))
		}
		out[i] = algorithms.Decision{
			Limit: r.Limit.Limit, ResetAfter: e.resetAt.Sub(now), RetryAfter: e.until.Sub(now),
			Now: now, Cached: true,
		}
	}
	if out != nil && algorithms.Tied(reqs) {
		out = c.keepTied(reqs, out)
	}
	if out == nil {
		ds, err := c.next.Check(ctx, reqs)
		if err == nil {
			c.remember(reqs, ds, now)
		}
		return ds, err
	}
	var rest []algorithms.Request
	var index []int
	for i, r := range reqs {
		if !out[i].Cached {
			rest = append(rest, r)
			index = append(index, i)
		}
	}
	c.hits.Add(float64(len(reqs) - len(rest)))
	if len(rest) == 0 {
		return out, nil
	}
	ds, err := c.next.Check(ctx, rest)
	if err != nil {
		return nil, err
	}
	c.remember(rest, ds, now)
	for j, i := range index {
		out[i] = ds[j]
	}
	return out, nil
}

// keepTied sends the all-or-nothing requests of reqs to the store when one
// of them was answered here: it is over its limit, so none of them may be
// counted, and only the store can decide them so (it does, at the one it
// rejects). It returns nil when nothing is answered here any more.
func (c *Cache) keepTied(reqs []algorithms.Request, out []algorithms.Decision) []algorithms.Decision {
	tied := false
	for i := range reqs {
		tied = tied || (out[i].Cached && algorithms.Voids(&reqs[i], &out[i]))
	}
	if !tied {
		return out
	}
	any := false
	for i := range reqs {
		if reqs[i].AllOrNothing {
			out[i] = algorithms.Decision{}
		}
		any = any || out[i].Cached
	}
	if !any {
		return nil
	}
	return out
}

// Clear forgets the cached rejections of reqs' keys and limits, then clears
// them on the wrapped store.
func (c *Cache) Clear(ctx context.Context, reqs []algorithms.Request) (int, error) {
	for _, r := range reqs {
		k := cacheKey{r.Key, r.Limit}
		s := c.stripeOf(k)
		s.mu.Lock()
		s.drop(k)
		s.mu.Unlock()
	}
	return c.next.Clear(ctx, reqs)
}

// lookup returns r's entry when it still rejects r.
func (c *Cache) lookup(r algorithms.Request, now time.Time) (cacheEntry, bool) {
	k := cacheKey{r.Key, r.Limit}
	s := c.stripeOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	if !ok {
		return cacheEntry{}, false
	}
	if !now.Before(e.until) {
		s.drop(k)
		return cacheEntry{}, false
	}
	return e, r.Hits >= e.hits
}

// remember caches the rejections among ds, decided on requests sent at sent.
func (c *Cache) remember(reqs []algorithms.Request, ds []algorithms.Decision, sent time.Time) {
	for i, d := range ds {
		if d.Allowed || d.Degraded || d.Cached || d.RetryAfter <= 0 || reqs[i].Hits <= 0 ||
			reqs[i].Limit.Accuracy == algorithms.Approximate {
			continue // (an approximate refusal may end at the next sync)
		}
		// A millisecond early, against rounding in the stores' retry times.
		until := sent.Add(d.RetryAfter - time.Millisecond)
		if !until.After(sent) {
			continue
		}
		k := cacheKey{reqs[i].Key, reqs[i].Limit}
		e := cacheEntry{hits: reqs[i].Hits, until: until, resetAt: sent.Add(d.ResetAfter)}
		s := c.stripeOf(k)
		s.mu.Lock()
		if old, ok := s.m[k]; ok && old.hits < e.hits && sent.Before(old.until) {
			s.mu.Unlock()
			continue // the entry already rejects smaller requests
		}
		s.put(k, e, c.maxBytes, sent)
		s.mu.Unlock()
	}
}

func (c *Cache) stripeOf(k cacheKey) *stripe {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(k.key.Scope)
	h.WriteByte(0)
	h.WriteString(k.key.Identifier)
	h.WriteByte(0)
	h.WriteString(k.key.Name)
	return &c.stripes[h.Sum64()%numStripes]
}

func entrySize(k cacheKey) int {
	return entryOverhead + len(k.key.Scope) + len(k.key.Identifier) + len(k.key.Name) + len(k.limit.Algorithm)
}

// put stores e, first dropping expired entries and then others while the
// stripe would go over maxBytes: an entry dropped early only costs a
// backend call.
func (s *stripe) put(k cacheKey, e cacheEntry, maxBytes int, now time.Time) {
	if _, ok := s.m[k]; ok {
		s.m[k] = e
		return
	}
	size := entrySize(k)
	if s.bytes+size > maxBytes {
		for old, v := range s.m {
			if !now.Before(v.until) {
				s.drop(old)
			}
		}
		for old := range s.m {
			if s.bytes+size <= maxBytes {
				break
			}
			s.drop(old)
		}
	}
	s.m[k] = e
	s.bytes += size
}

func (s *stripe) drop(k cacheKey) {
	if _, ok := s.m[k]; ok {
		delete(s.m, k)
		s.bytes -= entrySize(k)
	}
}

func (c *Cache) bytes() int {
	n := 0
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		n += s.bytes
		s.mu.Unlock()
	}
	return n
}

// Reset forgets the identifier's cached rejections, then resets it on the
// wrapped store.
func (c *Cache) Reset(ctx context.Context, scope, identifier string, alg algorithms.Algorithm) (int, error) {
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		for k := range s.m {
			if k.key.Scope == scope && k.key.Identifier == identifier && (alg == "" || k.limit.Algorithm == alg) {
				s.drop(k)
			}
		}
		s.mu.Unlock()
	}
	return c.next.Reset(ctx, scope, identifier, alg)
}

// Settle forgets the cached rejections of the settled holds' keys and
// limits (a settle can give quota back before a cached rejection's retry
// time), then settles them on the wrapped store.
func (c *Cache) Settle(ctx context.Context, sts []algorithms.Settle) ([]algorithms.SettleResult, error) {
	for _, st := range sts {
		k := cacheKey{st.Request.Key, st.Request.Limit}
		s := c.stripeOf(k)
		s.mu.Lock()
		s.drop(k)
		s.mu.Unlock()
	}
	return c.next.Settle(ctx, sts)
}

// Held reads on the wrapped store: the cache keeps no holds.
func (c *Cache) Held(ctx context.Context, reqs []algorithms.Request) ([]int64, error) {
	return c.next.Held(ctx, reqs)
}
