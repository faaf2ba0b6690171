package algorithms

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// FailureMode says how Guard answers when the counter backend fails.
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

// ErrOverloaded is Guard's answer when it could not get the backend's
// decision within the call's deadline while the backend itself was answering
// (Throttle, not the backend, was the bottleneck). Nothing is decided by the
// failure policy then: guessing would break the limit, so the caller is told
// to come back (REST 503 with Retry-After, gRPC UNAVAILABLE).
var ErrOverloaded = errors.New("overloaded: no decision from the counter backend within the deadline")

// Defaults of GuardOptions.
const (
	DefaultCallTimeout      = 500 * time.Millisecond
	DefaultBreakerWindow    = 10 * time.Second
	DefaultBreakerMinCalls  = 10
	DefaultBreakerRatio     = 0.5
	DefaultBreakerOpenFor   = 500 * time.Millisecond
	DefaultHungAfter        = time.Second
	maxDeadlineMargin       = 100 * time.Millisecond
	minDeadlineMargin       = 2 * time.Millisecond
	breakerCalls            = 100
	probeInterval           = 100 * time.Millisecond
	defaultProbeCallTimeout = time.Second
)

// GuardOptions configures a Guard.
type GuardOptions struct {
	// Mode is required.
	Mode FailureMode
	// Backend names the backend in metrics ("redis"). Default "redis".
	Backend string
	// Timeout, when > 0, is the budget of every backend call (the explicit
	// override BACKEND_TIMEOUT). Default 0: a call's budget is its caller's
	// deadline minus a margin (gRPC: Envoy's grpc-timeout), or
	// DefaultTimeout when the caller has none (REST). Either way the budget
	// never reaches past the caller's deadline minus the margin, so the
	// answer is back before the caller gives up. The backend client must
	// honour context deadlines (go-redis: ContextTimeoutEnabled).
	Timeout time.Duration
	// DefaultTimeout is the budget of a call whose context has no deadline
	// (REST /check). Default DefaultCallTimeout (500ms).
	DefaultTimeout time.Duration
	// BreakerWindow is the rolling window of the breaker: it weighs the
	// last 100 backend calls made within it. Default 10s.
	BreakerWindow time.Duration
	// BreakerMinCalls is how many calls the window must hold before their
	// failure ratio can open the circuit (1..100). Default 10.
	BreakerMinCalls int
	// BreakerRatio is the failure ratio (0..1] that opens the circuit.
	// Default 0.5.
	BreakerRatio float64
	// OpenFor is how long an open circuit answers by Mode without trying
	// the backend; then one probe at a time may go. Default 500ms.
	OpenFor time.Duration
	// HungAfter is how long the backend must have answered no call at all
	// before a timed-out call counts as its failure. Until then a timeout
	// is Throttle's own overload (ErrOverloaded): under CPU starvation the
	// goroutine that reads a reply can wait longer than a budget to run, and
	// that must not look like an outage. Connection errors count at once.
	// Default 1s.
	HungAfter time.Duration
	// Local is the fallback store of FailLocal. Default: a new MemoryStore.
	Local *MemoryStore
	// Registerer receives the guard's metrics. Optional.
	Registerer prometheus.Registerer
	// Now is the breaker's clock. Default time.Now.
	Now func() time.Time
}

// Guard wraps the counter backend with a deadline budget, a circuit breaker
// and a failure policy.
//
// Every call gets the backend's decision, unless the backend is really
// failing: a call that errs (connection refused, reset, a Redis error), or
// times out when the backend has answered no call for HungAfter, is a
// failure, and is answered by Mode (decisions marked Degraded). A call that
// times out while the backend answers others was slowed by Throttle itself
// (overload): it gets ErrOverloaded, never a guess, and does not count
// against the backend.
//
// The breaker weighs the last 100 calls made within BreakerWindow: it opens
// when they are at least BreakerMinCalls and at least BreakerRatio of them
// failed. (A count, not only a time span: under heavy traffic a long history
// of successes must not hide an outage for seconds.)
// While open, calls are answered by Mode at once. After OpenFor one probe at
// a time goes to the backend — a caller's call, or a PING from Run when there
// is no traffic. A probe always ends: its slot frees itself at its deadline,
// whatever happens to it. A successful probe closes the circuit; a failed one
// opens it for OpenFor again.
type Guard struct {
	primary Store
	opts    GuardOptions
	metrics guardMetrics
	// lastOK is when a call through the guard last succeeded (Unix ns);
	// answered, when the backend can tell, is when it last answered any
	// call: the evidence that the backend is up.
	lastOK   atomic.Int64
	answered func() time.Time

	// open mirrors the circuit for the lock-free fast path of admit; it
	// changes under mu.
	open atomic.Bool

	mu         sync.Mutex
	outcomes   [breakerCalls]callOutcome // ring of the latest calls
	next       int                       // where the next outcome goes
	openTill   time.Time                 // while open: no probe before this
	probeUntil time.Time                 // a probe is in flight until its deadline
}

type guardMetrics struct {
	errors   prometheus.Counter
	degraded *prometheus.CounterVec
	shed     prometheus.Counter
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
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultCallTimeout
	}
	if opts.BreakerWindow <= 0 {
		opts.BreakerWindow = DefaultBreakerWindow
	}
	if opts.BreakerMinCalls <= 0 || opts.BreakerMinCalls > breakerCalls {
		opts.BreakerMinCalls = DefaultBreakerMinCalls
	}
	if !(opts.BreakerRatio > 0 && opts.BreakerRatio <= 1) {
		opts.BreakerRatio = DefaultBreakerRatio
	}
	if opts.OpenFor <= 0 {
		opts.OpenFor = DefaultBreakerOpenFor
	}
	if opts.HungAfter <= 0 {
		opts.HungAfter = DefaultHungAfter
	}
	if opts.Mode == FailLocal && opts.Local == nil {
		opts.Local = NewMemoryStore(MemoryOptions{})
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	g := &Guard{primary: primary, opts: opts}
	if a, ok := primary.(interface{ LastAnswer() time.Time }); ok {
		g.answered = a.LastAnswer
	}
	g.metrics = guardMetrics{
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_backend_errors_total", Help: "Counter backend calls that failed: errors, or timeouts while the backend answered no other call.",
			ConstLabels: prometheus.Labels{"backend": opts.Backend},
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_degraded_decisions_total", Help: "Decisions made by the failure policy (FAILURE_MODE) instead of the counter backend.",
		}, []string{"mode"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_shed_total", Help: "Checks refused (REST 503, gRPC UNAVAILABLE) because their deadline passed while the backend was answering others: Throttle was overloaded.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_backend_circuit_open", Help: "1 while the counter backend's circuit breaker is open (or probing).",
			ConstLabels: prometheus.Labels{"backend": opts.Backend},
		}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{g.metrics.errors, g.metrics.degraded, g.metrics.shed, g.metrics.open} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register guard metrics: %w", err)
			}
		}
	}
	return g, nil
}

// Check decides reqs on the backend; by the failure policy when the backend
// is failing; or returns ErrOverloaded when Throttle could not get the
// backend's answer in time although the backend answers.
func (g *Guard) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	budget, ok := g.budget(ctx)
	if !ok {
		g.metrics.shed.Inc()
		return nil, fmt.Errorf("the caller's deadline leaves no time: %w", ErrOverloaded)
	}
	probe, allowed := g.admit(budget)
	if !allowed {
		return g.degrade(ctx, reqs)
	}
	cctx, cancel := context.WithTimeout(ctx, budget)
	var ds []Decision
	var err error
	if v, ok := g.primary.(validChecker); ok {
		ds, err = v.checkValid(cctx, reqs) // validated above: once per request
	} else {
		ds, err = g.primary.Check(cctx, reqs)
	}
	timedOut := cctx.Err() != nil
	cancel()
	switch {
	case err == nil:
		g.record(true, probe)
		return ds, nil
	case errors.Is(err, ErrInvalid):
		g.release(probe)
		return nil, err
	case ctx.Err() != nil:
		// The caller gave up or its deadline passed: not the backend's fault.
		g.release(probe)
		return nil, ctx.Err()
	case errors.Is(err, ErrOverloaded):
		// Never sent: it waited in Throttle's own queue.
		g.release(probe)
		g.metrics.shed.Inc()
		return nil, err
	case (timedOut || isTimeout(err)) && g.answeredSince(time.Now().Add(-g.opts.HungAfter)):
		// The backend answered other calls a moment ago: it is up, and
		// this call's time went in Throttle (queues, a starved CPU: the
		// goroutine that reads a reply may wait long to run).
		g.release(probe)
		g.metrics.shed.Inc()
		return nil, fmt.Errorf("no answer within the budget of %v (%v) while Redis answers others: %w", budget, err, ErrOverloaded)
	}
	g.metrics.errors.Inc()
	g.record(false, probe)
	return g.degrade(ctx, reqs)
}

// validChecker is a store that can decide a batch its caller validated
// (RedisStore), so that a request is validated once on its way.
type validChecker interface {
	checkValid(ctx context.Context, reqs []Request) ([]Decision, error)
}

// budget returns how long this call may wait for the backend, and false when
// the caller's deadline leaves no time at all.
func (g *Guard) budget(ctx context.Context) (time.Duration, bool) {
	b := g.opts.DefaultTimeout
	if g.opts.Timeout > 0 {
		b = g.opts.Timeout
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return b, true
	}
	left := time.Until(dl)
	left -= DeadlineMargin(left)
	if g.opts.Timeout <= 0 || left < b {
		b = left
	}
	return b, b > 0
}

// DeadlineMargin is how much of a caller's remaining time left Guard keeps
// for answering by policy and sending the answer: a fifth, between 2ms and
// 100ms (4ms of Envoy's default 20ms).
func DeadlineMargin(left time.Duration) time.Duration {
	return min(max(left/5, minDeadlineMargin), maxDeadlineMargin)
}

// isTimeout reports whether err is a deadline or I/O timeout (go-redis
// reports a context deadline as either, and a pool wait as its own error).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, redis.ErrPoolTimeout)
}

// answeredSince reports whether the backend answered some call after t.
func (g *Guard) answeredSince(t time.Time) bool {
	if g.answered != nil && g.answered().After(t) {
		return true
	}
	return g.lastOK.Load() > t.UnixNano()
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
	return g.open.Load()
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
	now := time.Now()
	out := make([]Decision, len(reqs))
	for i, r := range reqs {
		d := Decision{Limit: r.Limit.Limit, Now: now, Degraded: true, ResetAfter: g.opts.OpenFor}
		if g.opts.Mode == FailOpen {
			d.Allowed = true
			d.Remaining = max(0, r.Limit.Limit-r.Hits)
		} else {
			d.RetryAfter = g.opts.OpenFor
		}
		out[i] = d
	}
	return out, nil
}
