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
