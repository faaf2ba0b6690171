// Package ruledomain turns the descriptor rules a REST client made into the
// descriptors.Domain of the domain the client owns, for the two gRPC services
// (ratelimitsvc, quotasvc), and keeps it until the rules change.
package ruledomain

import (
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/store"
)

// Source is what a Cache needs of store.Cache: the client owning a domain,
// its descriptor rules, and a revision that changes with them.
type Source interface {
	ClientByDomain(domain string) (store.Client, bool)
	DescriptorRules(clientID string) []store.Rule
	Revision() int64
}

// Cache builds each client's domain once per revision of the rules. It is
// safe for concurrent use.
type Cache struct {
	src Source
	log *slog.Logger

	mu      sync.Mutex
	domains map[string]built // client id → its domain
}

type built struct {
	revision int64
	domain   *descriptors.Domain // nil when the rules were refused (logged once)
}

// New returns a Cache over src; src may be nil (no REST rules: every domain
// is nil).
func New(src Source, log *slog.Logger) *Cache {
	return &Cache{src: src, log: log, domains: map[string]built{}}
}

// Owned reports whether a REST client owns domain.
func (c *Cache) Owned(domain string) bool {
	if c.src == nil {
		return false
	}
	_, ok := c.src.ClientByDomain(domain)
	return ok
}

// Domain returns the domain built from the descriptor rules of the client
// that owns domain, or nil (no owner, no descriptor rules, or rules refused).
// The same pointer comes back until the rules change.
func (c *Cache) Domain(domain string) *descriptors.Domain {
	if c.src == nil {
		return nil
	}
	cl, ok := c.src.ClientByDomain(domain)
	if !ok {
		return nil
	}
	rev := c.src.Revision()
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.domains[cl.ID]; ok && b.revision == rev {
		return b.domain
	}
	rules := c.src.DescriptorRules(cl.ID)
	var dom *descriptors.Domain
	if len(rules) > 0 {
		var err error
		if dom, err = descriptors.NewDomain(domain, Rules(rules)); err != nil {
			c.log.Error("client descriptor rules refused", "domain", domain, "client_id", cl.ID, "err", err)
		}
	}
	c.domains[cl.ID] = built{revision: rev, domain: dom}
	return dom
}

// Rules converts REST rules to descriptor rules. A token bucket rule may
// come without a window (its refill is then limit/60 a second, or its
// refill_rate); a descriptor limit needs one, so it gets a minute, which
// means the same refill.
func Rules(rules []store.Rule) []descriptors.Rule {
	out := make([]descriptors.Rule, 0, len(rules))
	for _, r := range rules {
		es := make([]descriptors.Entry, len(r.Descriptors))
		for i, e := range r.Descriptors {
			es[i] = descriptors.Entry{Key: e.Key, Value: e.Value}
		}
		window := r.Window
		if window == 0 && algorithms.Algorithm(r.Algorithm) == algorithms.TokenBucket {
			window = time.Minute
		}
		out = append(out, descriptors.Rule{Entries: es, Limit: descriptors.RateLimit{
			RequestsPerUnit: uint32(min(r.Limit, math.MaxUint32)),
			Unit:            unitOf(window),
			Window:          window,
			Name:            r.Name,
			Algorithm:       algorithms.Algorithm(r.Algorithm),
			RefillRate:      r.RefillRate,
		}})
	}
	return out
}

// unitOf is the unit whose length is exactly w, or UnitUnknown.
func unitOf(w time.Duration) descriptors.Unit {
	for _, u := range []descriptors.Unit{descriptors.Second, descriptors.Minute, descriptors.Hour, descriptors.Day, descriptors.Week, descriptors.Month, descriptors.Year} {
		if u.Window() == w {
			return u
		}
	}
	return descriptors.UnitUnknown
}
