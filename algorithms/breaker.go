package algorithms

import (
	"context"
	"time"
)

// Guard's circuit breaker: which calls may go to the backend, what their
// outcomes do to the circuit, and the probe that closes it with no traffic.

// callOutcome is one backend call as the breaker remembers it.
type callOutcome struct {
	at     int64 // Unix ns of the breaker's clock; 0: an empty slot
	failed bool
}

// admit says whether this call may go to the backend: always while the
// circuit is closed; once it is open, one call at a time after OpenFor (the
// probe). A probe's slot frees itself after budget, however the call ends.
func (g *Guard) admit(budget time.Duration) (probe, ok bool) {
	if !g.open.Load() {
		return false, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open.Load() {
		return false, true
	}
	now := g.opts.Now()
	if now.Before(g.openTill) || now.Before(g.probeUntil) {
		return false, false
	}
	g.probeUntil = now.Add(budget)
	return true, true
}

// record counts a call's outcome, and opens or closes the circuit.
func (g *Guard) record(ok, probe bool) {
	if ok {
		g.lastOK.Store(time.Now().UnixNano())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.opts.Now()
	if g.open.Load() {
		if !probe && !ok {
			return // a call sent before the circuit opened
		}
		if ok {
			g.closeLocked()
			return
		}
		g.openLocked(now)
		return
	}
	g.outcomes[g.next] = callOutcome{at: now.UnixNano(), failed: !ok}
	g.next = (g.next + 1) % breakerCalls
	if ok {
		return
	}
	var calls, fails int
	since := now.Add(-g.opts.BreakerWindow).UnixNano()
	for i := range g.outcomes { // by index: a copy of the ring would not fit a small stack
		if o := &g.outcomes[i]; o.at != 0 && o.at > since {
			calls++
			if o.failed {
				fails++
			}
		}
	}
	if calls >= g.opts.BreakerMinCalls && float64(fails) >= g.opts.BreakerRatio*float64(calls) {
		g.openLocked(now)
	}
}

// release frees a probe's slot when its call ended without telling whether
// the backend works (the caller left, or the request was invalid).
func (g *Guard) release(probe bool) {
	if !probe {
		return
	}
	g.mu.Lock()
	g.probeUntil = time.Time{}
	g.mu.Unlock()
}

func (g *Guard) openLocked(now time.Time) {
	g.open.Store(true)
	g.openTill = now.Add(g.opts.OpenFor)
	g.probeUntil = time.Time{}
	g.metrics.open.Set(1)
}

func (g *Guard) closeLocked() {
	g.open.Store(false)
	g.outcomes = [breakerCalls]callOutcome{}
	g.probeUntil = time.Time{}
	g.metrics.open.Set(0)
}

// Run probes the backend while the circuit is open and no call does, so that
// the circuit closes by itself once the backend is back, traffic or not. It
// needs a backend with Ping (RedisStore); it returns when ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	p, ok := g.primary.(interface{ Ping(context.Context) error })
	if !ok {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		timeout := min(g.opts.DefaultTimeout, defaultProbeCallTimeout)
		if g.opts.Timeout > 0 {
			timeout = g.opts.Timeout
		}
		probe, allowed := g.admit(timeout)
		if !probe || !allowed {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := p.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			g.metrics.errors.Inc()
		}
		g.record(err == nil, true)
	}
}
