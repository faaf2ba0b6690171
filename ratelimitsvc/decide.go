package ratelimitsvc

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
)

// How a request's descriptors and their limits are decided together.
//
// Every limit of every descriptor is one engine request, all in one Check
// call. A request is admitted only when every limit that can fail it admits
// it, and a rejected request consumes nothing, from any of its descriptors:
// the engine requests of descriptors not in shadow mode or quota mode are
// AllOrNothing, so they are counted only when every one of them is admitted
// (atomically by the engine's script where their keys share a Redis node;
// fixed and sliding windows, which Redis decides without the script, and
// groups across Redis Cluster masters by refunding what was counted, so for
// the length of one round trip another request can see a count that is then
// refunded). A limit with always_count is counted even when it or another
// limit rejects the request (a cost reported after the response must be
// paid), and its rejection still voids the others. A descriptor with requests_per_unit 0
// rejects every request without the engine; the other grouped limits are
// then only read (hits 0) and reported over when their remaining is less
// than the request's hits.
//
// Shadow-mode descriptors never fail a request, and quota-mode ones fail it
// only together (overall.go): both are decided and counted on their own,
// outside the group, so a quota-mode descriptor is counted even when another
// descriptor rejects the request. Under Options.ShadowMode (SHADOW_MODE) no
// request is refused: every descriptor is decided and counted on its own,
// as the reference service counts. A group of one engine request is none.
//
// A descriptor's status reports the limit that decided it: of those over
// their limit, the one that passes last (the longest retry); else the one
// with the least remaining (the first of equals, in configuration order).
//
// With Options.CountRejectedHits every limit counts every hit on its own,
// as the reference service: no group, every request AlwaysCount.

// limited is one request descriptor and the limits that apply to it, ready
// for the engine, then decided.
type limited struct {
	index    int // descriptor position
	shadow   bool
	quota    bool           // quota_mode: over the limit fails the request only with every other quota
	statsKey string         // metric label: the reference service's stats key without the domain
	rollup   string         // statsKey without request values, for when value keys are capped
	metadata map[string]any // the descriptor's metadata, for dynamic metadata
	key      algorithms.Key
	hits     int64
	// handle names the hold of limits that reserve (descriptors.Reserve):
	// the value of the descriptor's handle entry; "" for none.
	handle string
	// limits are the descriptor's limits in configuration order: one
	// unlimited limit, or limits to decide. A descriptor of one limit holds
	// it in one, without an allocation of its own.
	limits []limitState
	one    [1]limitState
	// decided is the index in limits of the limit the status reports, set
	// by decide.
	decided int
}

// limitState is one limit of a descriptor, and what was decided on it.
type limitState struct {
	limit descriptors.RateLimit
	unit  rlsv3.RateLimitResponse_RateLimit_Unit
	// engine is the engine's limit; zero for a limit the engine does not
	// decide (unlimited, requests_per_unit 0).
	engine algorithms.Limit

	peek      int64 // the hits a read of 0 stands for, when the request is refused already
	over      bool
	remaining int64
	reset     time.Duration // until the state is fresh again
	retry     time.Duration // the engine's RetryAfter; 0 for requests_per_unit 0
	cached    bool          // answered by the over-limit cache
	degraded  bool          // decided by the failure policy (FAILURE_MODE), not by the backend
	hold      holdMode      // what the descriptor's handle makes of this limit (holds.go)
}

func (l *limited) unlimited() bool { return l.limits[0].limit.Unlimited }

// decisive is the limit the descriptor's status reports.
func (l *limited) decisive() *limitState { return &l.limits[l.decided] }

// passesIn is how long until a limit over its limit would admit the same
// request: the engine's retry, or, for requests_per_unit 0 (never), the end
// of its window.
func (ls *limitState) passesIn() time.Duration {
	if ls.retry > 0 {
		return ls.retry
	}
	return ls.reset
}

// grouped reports whether the descriptor's limits join the request's
// all-or-nothing group.
func (s *Server) grouped(l *limited) bool {
	return !l.shadow && !l.quota && !s.opts.CountRejectedHits && !s.opts.ShadowMode
}

// decide decides every limit of todo (none unlimited): requests_per_unit 0
// here, the rest in one engine call. The error is the engine's.
func (s *Server) decide(ctx context.Context, todo []*limited) error {
	if len(todo) == 0 {
		return nil
	}
	if err := s.settleHolds(ctx, todo); err != nil {
		return err
	}
	reqs, limits := s.collect(todo)
	if len(reqs) > 0 {
		decisions, err := s.opts.Limiter.Check(ctx, reqs)
		if err != nil {
			return err
		}
		noteDecisions(ctx, reqs, decisions)
		for k := range decisions {
			d, ls := &decisions[k], limits[k]
			ls.over = !d.Allowed || ls.peek > d.Remaining
			ls.remaining, ls.reset, ls.retry, ls.cached, ls.degraded = d.Remaining, d.ResetAfter, d.RetryAfter, d.Cached, d.Degraded
		}
	}
	for _, l := range todo {
		l.decided = decisive(l.limits)
	}
	return nil
}

// collect returns an engine request for every limit of todo the engine
// decides, and the limit each one decides (limits[k] takes the decision of
// reqs[k]), in one pass; it decides those of requests_per_unit 0 (over,
// without the engine). Then the group is tied together (a group of one is
// no group: the engine decides it alone, exactly as AllOrNothing would, at
// no group's cost), and when a requests_per_unit 0 of the group refused the
// request already, the group's other limits are only read: over if what
// remains is less than the request's hits (an always-counting limit is
// counted anyway).
func (s *Server) collect(todo []*limited) (reqs []algorithms.Request, limits []*limitState) {
	reqs = make([]algorithms.Request, 0, len(todo))
	limits = make([]*limitState, 0, len(todo))
	var buf [8]int
	group := buf[:0]  // the positions of the group's requests
	rejected := false // by a requests_per_unit 0 of the group
	for _, l := range todo {
		grouped := s.grouped(l)
		for i := range l.limits {
			ls := &l.limits[i]
			ls.peek = 0
			if ls.hold == holdSettled {
				continue // decided by its settlement
			}
			if ls.engine.Algorithm == "" {
				ls.over = true
				ls.reset = untilUnitEnds(ls.limit.WindowLength(), s.opts.Now())
				rejected = rejected || grouped
				continue
			}
			if grouped {
				group = append(group, len(reqs))
			}
			// Domain-scoped counters: no API but the REST counters
			// endpoint (which clears them by key and limit) resets them, so
			// Redis keeps no index for them; counted first, refunded after.
			r := algorithms.Request{Key: l.key, Limit: ls.engine, Hits: l.hits,
				Unindexed: true, Counting: algorithms.CountThenRefund,
				AlwaysCount: ls.limit.AlwaysCount || s.opts.CountRejectedHits}
			ls.peek = holdRequest(&r, l, ls)
			reqs = append(reqs, r)
			limits = append(limits, ls)
		}
	}
	for _, k := range group {
		r := &reqs[k]
		r.AllOrNothing = len(group) > 1
		if rejected && !r.AlwaysCount {
			limits[k].peek, r.Hits, r.Hold = max(limits[k].peek, r.Hits), 0, nil
		}
	}
	return reqs, limits
}

// decisive returns the index of the limit that decided: of those over, the
// one that passes last; else the one with the least remaining; the first
// of equals.
func decisive(ls []limitState) int {
	best := 0
	for i := 1; i < len(ls); i++ {
		b, c := &ls[best], &ls[i]
		switch {
		case c.over != b.over:
			if c.over {
				best = i
			}
		case c.over:
			if c.passesIn() > b.passesIn() {
				best = i
			}
		case c.remaining < b.remaining:
			best = i
		}
	}
	return best
}
