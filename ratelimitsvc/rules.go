package ratelimitsvc

import (
	"math"
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

// toDescriptorRules converts REST rules to descriptor rules.
func toDescriptorRules(rules []store.Rule) []descriptors.Rule {
	out := make([]descriptors.Rule, 0, len(rules))
	for _, r := range rules {
		es := make([]descriptors.Entry, len(r.Descriptors))
		for i, e := range r.Descriptors {
			es[i] = descriptors.Entry{Key: e.Key, Value: e.Value}
		}
		out = append(out, descriptors.Rule{Entries: es, Limit: descriptors.RateLimit{
			RequestsPerUnit: uint32(min(r.Limit.Limit, math.MaxUint32)),
			Unit:            unitOf(r.Limit.Window),
			Window:          r.Limit.Window,
			Name:            r.Name,
			Algorithm:       r.Limit.Algorithm,
			RefillRate:      r.Limit.RefillRate,
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
