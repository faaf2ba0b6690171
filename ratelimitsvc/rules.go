package ratelimitsvc

import (
	"math"
	"strconv"
	"time"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/store"
)

// The descriptor rules REST clients make answer Envoy requests for the
// domain the client owns, as a descriptors.Domain built from them and
// rebuilt when they change.

// ruleSource is what the service needs of store.Cache: the client owning a
// domain, its descriptor rules, and a revision that changes with them.
type ruleSource interface {
	ClientByDomain(domain string) (store.Client, bool)
	DescriptorRules(clientID string) []store.Rule
	Revision() int64
}

type ruleDomain struct {
	revision int64
	domain   *descriptors.Domain // nil when the rules were refused (logged once)
}

// ruleDomain returns the domain built from the descriptor rules of the
// client that owns domain, or nil. It is rebuilt when the rules change.
func (s *Server) ruleDomain(domain string) *descriptors.Domain {
	if s.opts.Rules == nil {
		return nil
	}
	c, ok := s.opts.Rules.ClientByDomain(domain)
	if !ok {
		return nil
	}
	rev := s.opts.Rules.Revision()
	s.mu.Lock()
	defer s.mu.Unlock()
	if rd, ok := s.domains[c.ID]; ok && rd.revision == rev {
		return rd.domain
	}
	rules := s.opts.Rules.DescriptorRules(c.ID)
	var dom *descriptors.Domain
	if len(rules) > 0 {
		var err error
		if dom, err = descriptors.NewDomain(domain, toDescriptorRules(rules)); err != nil {
			s.opts.Log.Error("client descriptor rules refused", "domain", domain, "client_id", c.ID, "err", err)
		}
	}
	s.domains[c.ID] = ruleDomain{revision: rev, domain: dom}
	return dom
}

// toDescriptorRules converts REST rules to descriptor rules. A limit is
// named by its own name, else by the rule's: the rule's name alone for a
// rule of one limit, with "[k]" appended for its k-th limit (from 0) when
// it has several.
func toDescriptorRules(rules []store.Rule) []descriptors.Rule {
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
			unit, mult := unitOf(l.Limit.Window)
			converted[i] = descriptors.RateLimit{
				RequestsPerUnit: uint32(min(l.Limit.Limit, math.MaxUint32)),
				Unit:            unit,
				UnitMultiplier:  mult,
				Window:          l.Limit.Window,
				Name:            name,
				Algorithm:       l.Limit.Algorithm,
				RefillRate:      l.Limit.RefillRate,
				AlwaysCount:     l.AlwaysCount,
			}
		}
		out = append(out, descriptors.Rule{Entries: es, Limit: converted[0], More: converted[1:]})
	}
	return out
}

// unitOf is the longest unit that divides w, and how many of it w is (1
// is given as 0, as Envoy leaves out a multiplier of 1): 300 s is 5
// minutes, 90 s is 90 seconds. UnitUnknown for a window of no whole
// seconds, or none (a token bucket without a window).
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
