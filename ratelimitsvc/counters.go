package ratelimitsvc

import (
	"context"
	"fmt"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/envoycounters"
)

// The counters of Envoy descriptors, read and reset for the REST API
// (restapi's POST /descriptors/{domain}/counters and …/counters/reset):
// the descriptors are matched and prepared exactly as ShouldRateLimit
// prepares a request's (the same engine Key and Limit), then read with a
// Check of 0 hits, or cleared with Store.Clear. Who may do it for which
// domain is the REST API's decision (DomainSource tells it where a domain's
// limits come from).

// DomainSource says where the limits of domain come from: the YAML
// configuration (which wins), the descriptor rules of the REST client that
// owns the domain, or nowhere.
func (s *Server) DomainSource(domain string) envoycounters.Source {
	_, src := s.domain(domain)
	return src
}

// ReadCounters reads the counters of each descriptor on domain without
// counting anything: its limits and, for each, how many hits remain and
// when the state is fresh again. The error wraps envoycounters.ErrNoLimits
// or ErrInvalid, or is the counter backend's.
func (s *Server) ReadCounters(ctx context.Context, domain string, ds []envoycounters.Descriptor) ([]envoycounters.Counters, error) {
	prepared, out, err := s.prepareCounters(domain, ds)
	if err != nil {
		return nil, err
	}
	todo := make([]*limited, 0, len(prepared))
	for _, l := range prepared {
		if l != nil && !l.unlimited() {
			todo = append(todo, l) // of 0 hits: read, never counted
		}
	}
	if err := s.decide(ctx, todo); err != nil {
		return nil, err
	}
	for _, l := range todo {
		for k := range l.limits {
			out[l.index].Limits[k].Remaining = l.limits[k].remaining
			out[l.index].Limits[k].ResetAfter = l.limits[k].reset
		}
	}
	return out, nil
}

// ResetCounters deletes the counters of each descriptor on domain, so its
// next request starts from fresh state, and returns the descriptors'
// limits and how many counters existed. This replica's over-limit cache
// forgets them too; another replica's keeps rejecting a cleared descriptor
// at most until the moment its backend had said it could pass. The error
// wraps envoycounters.ErrNoLimits or ErrInvalid, or is the counter
// backend's.
func (s *Server) ResetCounters(ctx context.Context, domain string, ds []envoycounters.Descriptor) ([]envoycounters.Counters, int, error) {
	prepared, out, err := s.prepareCounters(domain, ds)
	if err != nil {
		return nil, 0, err
	}
	var reqs []algorithms.Request
	for _, l := range prepared {
		if l == nil {
			continue
		}
		for _, ls := range l.limits {
			if ls.engine.Algorithm != "" {
				reqs = append(reqs, algorithms.Request{Key: l.key, Limit: ls.engine, Unindexed: true, Counting: algorithms.CountThenRefund})
			}
		}
	}
	if len(reqs) == 0 {
		return out, 0, nil
	}
	n, err := s.opts.Limiter.Clear(ctx, reqs)
	if err != nil {
		return nil, 0, err
	}
	return out, n, nil
}

// prepareCounters checks and prepares ds as ShouldRateLimit would a
// request of them, and describes their limits.
func (s *Server) prepareCounters(domain string, ds []envoycounters.Descriptor) ([]*limited, []envoycounters.Counters, error) {
	if domain == "" {
		return nil, nil, envoycounters.Invalidf("domain must not be empty")
	}
	req, err := toDescriptors(ds)
	if err != nil {
		return nil, nil, err
	}
	if msg, _ := s.refuse(domain, req); msg != "" {
		return nil, nil, envoycounters.Invalidf("%s", msg)
	}
	if _, src := s.domain(domain); src == envoycounters.NoLimits {
		return nil, nil, fmt.Errorf("domain %q: %w", domain, envoycounters.ErrNoLimits)
	}
	prepared := s.prepareAll(domain, req, 0)
	out := make([]envoycounters.Counters, len(ds))
	for i, l := range prepared {
		if l == nil {
			continue
		}
		l.handle = "" // a read never reserves, a reset never settles
		c := envoycounters.Counters{Matched: true, Unlimited: l.unlimited(), ShadowMode: l.shadow, Key: l.rollup}
		if !c.Unlimited {
			for _, ls := range l.limits {
				c.Limits = append(c.Limits, counterLimit(ls))
			}
		}
		out[i] = c
	}
	return prepared, out, nil
}

// counterLimit describes one limit.
func counterLimit(ls limitState) envoycounters.Limit {
	cl := envoycounters.Limit{
		Name: ls.limit.Name, RequestsPerUnit: ls.limit.RequestsPerUnit, Window: ls.limit.WindowLength(),
		Algorithm: string(ls.limit.EngineAlgorithm()), AlwaysCount: ls.limit.AlwaysCount,
	}
	if ls.unit != 0 {
		cl.Unit, cl.UnitMultiplier = ls.unit.String(), ls.limit.Multiplier()
	}
	return cl
}

// toDescriptors converts the REST API's descriptors into Envoy's.
func toDescriptors(ds []envoycounters.Descriptor) ([]*rlcommon.RateLimitDescriptor, error) {
	out := make([]*rlcommon.RateLimitDescriptor, len(ds))
	for i, d := range ds {
		rd := &rlcommon.RateLimitDescriptor{Entries: make([]*rlcommon.RateLimitDescriptor_Entry, len(d.Entries))}
		for j, e := range d.Entries {
			rd.Entries[j] = &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		if o := d.Limit; o != nil {
			u, err := descriptors.ParseUnit(o.Unit)
			if err != nil {
				return nil, envoycounters.Invalidf("descriptor %d limit: unit %q is not one of second, minute, hour, day, week, month, year", i, o.Unit)
			}
			rd.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: o.RequestsPerUnit, Unit: typev3.RateLimitUnit(u)}
			if o.UnitMultiplier > 0 {
				rd.Limit.UnitMultiplier = wrapperspb.UInt32(o.UnitMultiplier)
			}
		}
		out[i] = rd
	}
	return out, nil
}
