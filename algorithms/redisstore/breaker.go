package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Guard's circuit breaker: which calls may go to the backend, what their
// outcomes do to the circuit, and the probe that closes it with no traffic.

// breaker is the circuit of one Redis master (of the single Redis).
type breaker struct {
	sh *master
	// lastOK is when a call through the guard last succeeded (Unix ns).
	lastOK atomic.Int64
	// open mirrors the circuit for the lock-free fast path of admit; it
	// changes under mu.
	open atomic.Bool

	mu         sync.Mutex
	outcomes   [breakerCalls]callOutcome // ring of the latest calls
	next       int                       // where the next outcome goes
	openTill   time.Time                 // while open: no probe before this
	probeUntil time.Time                 // a probe is in flight until its deadline
}

// callOutcome is one backend call as the breaker remembers it.
type callOutcome struct {
	at     int64 // Unix ns of the breaker's clock; 0: an empty slot
	failed bool
}

// admit says whether this call may go to b's master: always while the
// circuit is closed; once it is open, one call at a time after OpenFor (the
// probe). A probe's slot frees itself after budget, however the call ends.
func (g *Guard) admit(b *breaker, budget time.Duration) (probe, ok bool) {
	if !b.open.Load() {
		return false, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return false, true
	}
	now := g.opts.Now()
	if now.Before(b.openTill) || now.Before(b.probeUntil) {
		return false, false
	}
	b.probeUntil = now.Add(budget)
	return true, true
}

// record counts a call's outcome, and opens or closes the circuit.
func (g *Guard) record(b *breaker, ok, probe bool) {
	if ok {
		b.lastOK.Store(time.Now().UnixNano())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := g.opts.Now()
	if b.open.Load() {
		if !probe && !ok {
			return // a call sent before the circuit opened
		}
		if ok {
			g.closeLocked(b)
			return
		}
		g.openLocked(b, now)
		return
	}
	b.outcomes[b.next] = callOutcome{at: now.UnixNano(), failed: !ok}
	b.next = (b.next + 1) % breakerCalls
	if ok {
		return
	}
	var calls, fails int
	since := now.Add(-g.opts.BreakerWindow).UnixNano()
	for i := range b.outcomes { // by index: a copy of the ring would not fit a small stack
		if o := &b.outcomes[i]; o.at != 0 && o.at > since {
			calls++
			if o.failed {
				fails++
			}
		}
	}
	if calls >= g.opts.BreakerMinCalls && float64(fails) >= g.opts.BreakerRatio*float64(calls) {
		g.openLocked(b, now)
	}
}

// release frees a probe's slot when its call ended without telling whether
// the master works (the caller left, or the request was invalid).
func (g *Guard) release(b *breaker, probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probeUntil = time.Time{}
	b.mu.Unlock()
}

func (g *Guard) openLocked(b *breaker, now time.Time) {
	if !b.open.Load() {
		g.countOpen(b, 1)
	}
	b.open.Store(true)
	b.openTill = now.Add(g.opts.OpenFor)
	b.probeUntil = time.Time{}
}

func (g *Guard) closeLocked(b *breaker) {
	if b.open.Load() {
		g.countOpen(b, -1)
	}
	b.open.Store(false)
	b.outcomes = [breakerCalls]callOutcome{}
	b.probeUntil = time.Time{}
}

// countOpen follows the number of open circuits in the metrics as b opens
// (+1) or closes (-1).
func (g *Guard) countOpen(b *breaker, delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.breakers.Load(b.sh); !ok || cur != b {
		return // forgotten by openBreakers
	}
	if g.metrics.shardOpen != nil {
		g.metrics.shardOpen.WithLabelValues(b.sh.name).Set(float64(max(delta, 0)))
	}
	g.metrics.open.Set(float64(min(g.openN.Add(int64(delta)), 1)))
}

// Run probes Redis while a circuit is open and no call does, so that the
// circuit closes by itself once its master is back, traffic or not. On a
// Cluster it also reads the slot table again while a circuit is open, so
// that keys follow a replica promoted in a dead master's place. It returns
// when ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if open := g.openBreakers(); len(open) > 0 {
			g.store.route.refresh(ctx, time.Now().Add(-topologyMinEvery))
			for _, b := range g.openBreakers() {
				g.probe(ctx, b)
			}
		}
	}
}

// probe PINGs b's master when its circuit is open and may be probed.
func (g *Guard) probe(ctx context.Context, b *breaker) {
	timeout := min(g.opts.DefaultTimeout, defaultProbeCallTimeout)
	if g.opts.Timeout > 0 {
		timeout = g.opts.Timeout
	}
	probe, allowed := g.admit(b, timeout)
	if !probe || !allowed {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := pingMaster(pctx, b.sh)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		g.metrics.errors.Inc()
		if g.metrics.shardErrors != nil {
			g.metrics.shardErrors.WithLabelValues(b.sh.name).Inc()
		}
	}
	g.record(b, err == nil, true)
}

// openBreakers returns the open circuits of the masters that serve slots
// now. A master that no longer does (a replica took its place) is forgotten:
// no key goes to it.
func (g *Guard) openBreakers() []*breaker {
	serving := map[*master]bool{}
	for _, sh := range g.store.route.masters() {
		serving[sh] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var open []*breaker
	g.breakers.Range(func(k, v any) bool {
		sh, b := k.(*master), v.(*breaker)
		switch {
		case !serving[sh]:
			if b.open.Load() {
				g.openN.Add(-1)
			}
			g.breakers.Delete(sh)
			if g.metrics.shardOpen != nil {
				g.metrics.shardOpen.DeleteLabelValues(sh.name)
			}
		case b.open.Load():
			open = append(open, b)
		}
		return true
	})
	g.metrics.open.Set(float64(min(g.openN.Load(), 1)))
	return open
}
