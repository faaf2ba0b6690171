package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// checkPath is one Check's way to Redis: the store's own (Store.Check), or
// behind the Guard (Guard.Check), whose breaker per master, deadline
// budget and failure policy plug in at the one call each master gets
// (onMaster).
type checkPath struct {
	s *Store
	g *Guard // nil: no breaker, no budget, no failure policy
	// budget is how long a master's call may take (Guard.budget), taken
	// from the caller's deadline when exact begins.
	budget time.Duration
}

// exact decides a validated batch on Redis, each master's part at once
// (router.dispatch), and takes back what masters counted for an
// all-or-nothing group another master voided.
func (p *checkPath) exact(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if p.g != nil {
		var ok bool
		if p.budget, ok = p.g.budget(ctx); !ok {
			p.g.metrics.shed.Inc()
			return nil, fmt.Errorf("the caller's deadline leaves no time: %w", algorithms.ErrOverloaded)
		}
	}
	ds, err := p.s.route.dispatch(ctx, reqs, p)
	if err != nil {
		return nil, err
	}
	p.s.refundVoided(ctx, reqs, ds)
	return ds, nil
}

// onMaster decides the part of a batch that master sh holds: behind its
// breaker when guarded. last is false when a redirect will be followed
// (dispatch sends the part once more).
func (p *checkPath) onMaster(ctx context.Context, sh *master, reqs []algorithms.Request, last bool) ([]algorithms.Decision, error) {
	if p.g == nil {
		return p.s.onMaster(ctx, time.Time{}, sh, reqs)
	}
	return p.g.onMaster(ctx, p.budget, p.g.breakerOf(sh), reqs, last)
}

// approxDown reports whether the approximate requests of master sh are
// answered by the failure policy (byPolicy) rather than from the table:
// guarded, and its syncs have failed for the Guard's HungAfter.
func (p *checkPath) approxDown(sh *master, now time.Time) bool {
	return p.g != nil && sh != nil && sh.approxDown(now, p.g.opts.HungAfter)
}

// anyApproxDown reports whether approxDown holds for some master now.
func (p *checkPath) anyApproxDown(now time.Time) bool {
	if p.g == nil {
		return false
	}
	for _, sh := range p.s.route.masters() {
		if p.approxDown(sh, now) {
			return true
		}
	}
	return false
}

// byPolicy answers by the failure policy the approximate requests of a
// master whose syncs have failed for a while, or whose asks got no answer
// in time. Unguarded, there is no policy: no decision (ErrOverloaded).
func (p *checkPath) byPolicy(ctx context.Context, sh *master, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if p.g == nil {
		return nil, fmt.Errorf("redis: approximate limit past its lease, no answer in time: %w", algorithms.ErrOverloaded)
	}
	var b *breaker // none for slots no master serves
	if sh != nil {
		b = p.g.breakerOf(sh)
	}
	return p.g.degrade(ctx, b, reqs)
}
