// Package ruledomain turns the descriptor rules a REST client made into the
// descriptors.Domain of the domain the client owns, for the two gRPC services
// (ratelimitsvc, quotasvc), and keeps it until the rules change.
package ruledomain

import (
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/store"
)

// Source is what a Cache needs of store.Cache: the client owning a domain,
// its descriptor rules and their overrides, and a revision of the client's
// rows that changes with them.
type Source interface {
	ClientByDomain(domain string) (store.Client, bool)
	DescriptorRules(clientID string) []store.Rule
	Override(clientID, rule, identifier string) (store.Override, bool)
	ClientRevision(clientID string) int64
}

// Cache builds each client's domain once per revision of its rules (another
// client's write leaves it be). It is safe for concurrent use.
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
	rev := c.src.ClientRevision(cl.ID)
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

// Rules converts REST rules to descriptor rules. A limit is named by its
// own name, else by the rule's: the rule's name alone for a rule of one
// limit, with "[k]" appended for its k-th limit (from 0) when it has
// several. A token bucket limit may come without a window (its refill is
// then limit/60 a second, or its refill_rate); a descriptor limit needs one,
// so it gets a minute, which means the same refill.
func Rules(rules []store.Rule) []descriptors.Rule {
	out := make([]descriptors.Rule, 0, len(rules))
	for _, r := range rules {
		es := make([]descriptors.Entry, len(r.Descriptors))
		for i, e := range r.Descriptors {
			es[i] = descriptors.Entry{Key: e.Key, Value: e.Value}
		}
		limits := r.Limits()
		converted := make([]descriptors.RateLimit, len(limits))
		for i, l := range limits {
			name := l.Name
			switch {
			case name != "":
			case len(limits) == 1:
				name = r.Name
			default:
				name = r.Name + "[" + strconv.Itoa(i) + "]"
			}
			window := l.Limit.Window
			if window == 0 && l.Limit.Algorithm == algorithms.TokenBucket {
				window = time.Minute
			}
			unit, mult := unitOf(window)
			converted[i] = descriptors.RateLimit{
				RequestsPerUnit: uint32(min(l.Limit.Limit, math.MaxUint32)),
				Unit:            unit,
				UnitMultiplier:  mult,
				Window:          window,
				Name:            name,
				Algorithm:       l.Limit.Algorithm,
				RefillRate:      l.Limit.RefillRate,
				AlwaysCount:     l.AlwaysCount,
				Accuracy:        l.Limit.Accuracy,
				Global:          l.Limit.Global,
			}
			if v := r.Reserve; v != nil {
				converted[i].Reserve = &descriptors.Reserve{Hits: v.Hits, TTL: v.TTL, Handle: v.Handle}
			}
		}
		if len(r.RateLimits) == 0 {
			converted[0].Rule = r.Name // its overrides apply (WithOverride)
		}
		out = append(out, descriptors.Rule{Entries: es, Limit: converted[0], More: converted[1:]})
	}
	return out
}

// WithOverride returns rl, a limit of a REST rule of one limit, with the
// limit and window of the rule's override o: an Envoy request the rule
// matches takes the override of its identifier (the value of the request
// descriptor's last entry). The rest (algorithm, accuracy, scope) stays the rule's.
func WithOverride(rl descriptors.RateLimit, o store.Override) descriptors.RateLimit {
	rl.RequestsPerUnit = uint32(min(o.Limit, math.MaxUint32))
	if o.Window != 0 {
		rl.Window = o.Window
		rl.Unit, rl.UnitMultiplier = unitOf(o.Window)
	}
	return rl
}

// unitOf is the longest unit that divides w, and how many of it w is (1
// is given as 0, as Envoy leaves out a multiplier of 1): 300 s is 5
// minutes, 90 s is 90 seconds. UnitUnknown for a window of no whole
// seconds, or none.
func unitOf(w time.Duration) (descriptors.Unit, uint32) {
	for _, u := range []descriptors.Unit{descriptors.Year, descriptors.Month, descriptors.Week, descriptors.Day, descriptors.Hour, descriptors.Minute, descriptors.Second} {
		if n := w / u.Window(); w > 0 && w%u.Window() == 0 && n <= math.MaxUint32 {
			if n == 1 {
				return u, 0
			}
			return u, uint32(n)
		}
	}
	return descriptors.UnitUnknown, 0
}
