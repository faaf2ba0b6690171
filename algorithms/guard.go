package algorithms

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FailureMode says how Guard answers when the counter backend fails or is
// too slow.
type FailureMode string

// The failure modes (setting FAILURE_MODE).
const (
	// FailOpen admits every request while the backend is down (the default,
	// as Envoy's own failure_mode_deny: false).
	FailOpen FailureMode = "open"
	// FailClosed rejects every request while the backend is down.
	FailClosed FailureMode = "closed"
	// FailLocal keeps enforcing with this replica's own memory counters
	// while the backend is down: each replica admits up to the limit.
	FailLocal FailureMode = "local"
)

// ParseFailureMode returns the mode named s.
func ParseFailureMode(s string) (FailureMode, error) {
	switch m := FailureMode(s); m {
	case FailOpen, FailClosed, FailLocal:
		return m, nil
	}
	return "", fmt.Errorf("failure mode %q is not one of open, closed, local", s)
}

// GuardOptions configures a Guard.
type GuardOptions struct {
	// Mode is required.
	Mode FailureMode
	// Backend names the backend in metrics ("redis"). Default "redis".
	Backend string
	// Timeout bounds every backend call. Default 15ms: an answer must reach
	// Envoy well within its 20ms default call timeout. The backend client
	// must honour context deadlines (go-redis: ContextTimeoutEnabled).
	Timeout time.Duration
	// Failures is how many consecutive failures open the circuit. Default 3.
	Failures int
	// Cooldown is how long an open circuit skips the backend before one
	// request probes it again. Default 1s.
	Cooldown time.Duration
	// Local is the fallback store of FailLocal. Default: a new MemoryStore.
	Local *MemoryStore
	// Registerer receives the guard's metrics. Optional.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Guard wraps the counter backend with a deadline, a circuit breaker and a
// failure policy. When the backend errors, times out, or its circuit is open,
// Guard answers by Mode and marks the decisions Degraded; it goes back to the
// backend by itself once a probe succeeds.
type Guard struct {
	primary  Store
	opts     GuardOptions
	metrics  guardMetrics
	mu       sync.Mutex
	failures int       // consecutive
	openTill time.Time // circuit open until then
	probing  bool      // a half-open probe is in flight
}

type guardMetrics struct {
	errors   prometheus.Counter
	degraded *prometheus.CounterVec
	open     prometheus.Gauge
}

// NewGuard wraps primary.
func NewGuard(primary Store, opts GuardOptions) (*Guard, error) {
	if _, err := ParseFailureMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	if opts.Backend == "" {
		opts.Backend = "redis"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Millisecond
	}
	if opts.Failures <= 0 {
		opts.Failures = 3
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = time.Second
	}
	if opts.Mode == FailLocal && opts.Local == nil {
		opts.Local = NewMemoryStore(MemoryOptions{})
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	g := &Guard{primary: primary, opts: opts}
	g.metrics = guardMetrics{
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_backend_errors_total", Help: "Counter backend calls that failed or timed out.",
			ConstLabels: prometheus.Labels{"backend": opts.Backend},
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_degraded_decisions_total", Help: "Decisions made by the failure policy instead of the counter backend.",
		}, []string{"mode"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_backend_circuit_open", Help: "1 while the counter backend's circuit breaker is open.",
			ConstLabels: prometheus.Labels{"backend": opts.Backend},
		}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{g.metrics.errors, g.metrics.degraded, g.metrics.open} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register guard metrics: %w", err)
			}
		}
	}
	return g, nil
}

// Check decides reqs on the backend, or by the failure policy when the
// backend cannot answer in time.
func (g *Guard) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	if !g.admit() {
		return g.degrade(ctx, reqs)
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	ds, err := g.primary.Check(cctx, reqs)
	cancel()
	if err == nil {
		g.succeeded()
		return ds, nil
	}
	if errors.Is(err, ErrInvalid) {
		g.succeeded()
		return nil, err
	}
	if ctx.Err() != nil {
		// The caller gave up (Envoy's own timeout): not the backend's fault.
		g.release()
		return nil, ctx.Err()
	}
	g.failed()
	return g.degrade(ctx, reqs)
}

// Reset resets on the backend (and on the local fallback in FailLocal). It
// fails when the backend cannot be reached: a reset that did not happen must
// not look like one that did.
func (g *Guard) Reset(ctx context.Context, scope, identifier string, alg Algorithm) (int, error) {
	if g.opts.Local != nil {
		if _, err := g.opts.Local.Reset(ctx, scope, identifier, alg); err != nil {
			return 0, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, max(g.opts.Timeout, time.Second))
	defer cancel()
	return g.primary.Reset(cctx, scope, identifier, alg)
}

// Degraded reports whether the circuit is open now.
func (g *Guard) Degraded() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opts.Now().Before(g.openTill)
}

// admit says whether this call may go to the backend: always while the
// circuit is closed; once per cooldown while it is open (the probe).
func (g *Guard) admit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failures < g.opts.Failures {
		return true
	}
	if g.probing || g.opts.Now().Before(g.openTill) {
		return false
	}
	g.probing = true
	return true
}

func (g *Guard) succeeded() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures, g.probing, g.openTill = 0, false, time.Time{}
	g.metrics.open.Set(0)
}

func (g *Guard) release() {
	g.mu.Lock()
	g.probing = false
	g.mu.Unlock()
}

func (g *Guard) failed() {
	g.metrics.errors.Inc()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures++
	g.probing = false
	if g.failures >= g.opts.Failures {
		g.openTill = g.opts.Now().Add(g.opts.Cooldown)
		g.metrics.open.Set(1)
	}
}

// degrade answers by the failure policy.
func (g *Guard) degrade(ctx context.Context, reqs []Request) ([]Decision, error) {
	g.metrics.degraded.WithLabelValues(string(g.opts.Mode)).Add(float64(len(reqs)))
	if g.opts.Mode == FailLocal {
		ds, err := g.opts.Local.Check(ctx, reqs)
		for i := range ds {
			ds[i].Degraded = true
		}
		return ds, err
	}
	now := g.opts.Now()
	out := make([]Decision, len(reqs))
	for i, r := range reqs {
		d := Decision{Limit: r.Limit.Limit, Now: now, Degraded: true, ResetAfter: g.opts.Cooldown}
		if g.opts.Mode == FailOpen {
			d.Allowed = true
			d.Remaining = max(0, r.Limit.Limit-r.Hits)
		} else {
			d.RetryAfter = g.opts.Cooldown
		}
		out[i] = d
	}
	return out, nil
}
