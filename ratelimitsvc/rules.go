package ratelimitsvc

import (
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/ruledomain"
)

// The descriptor rules REST clients make answer Envoy requests for the
// domain the client owns, as a descriptors.Domain built from them and
// rebuilt when they change (package ruledomain, shared with quotasvc).

// ruleSource is what the service needs of store.Cache: the client owning a
// domain, its descriptor rules, and a revision that changes with them.
type ruleSource = ruledomain.Source

// ruleDomain returns the domain built from the descriptor rules of the
// client that owns domain, or nil.
func (s *Server) ruleDomain(domain string) *descriptors.Domain {
	return s.rules.Domain(domain)
}

// withOverride returns rl, a limit matched on domain for the entries es (a
// request descriptor's, without its handle entry), with the override its
// rule has for their identifier (the value of the last entry), if any: a
// REST rule's per-identifier overrides hold for the Envoy requests it
// matches too. Limits of the YAML have no rule, and keep theirs.
func (s *Server) withOverride(domain string, rl descriptors.RateLimit, es []descriptors.Entry) descriptors.RateLimit {
	if rl.Rule == "" || s.opts.Rules == nil || len(es) == 0 {
		return rl
	}
	c, ok := s.opts.Rules.ClientByDomain(domain)
	if !ok {
		return rl
	}
	if o, ok := s.opts.Rules.Override(c.ID, rl.Rule, es[len(es)-1].Value); ok {
		return ruledomain.WithOverride(rl, o)
	}
	return rl
}
