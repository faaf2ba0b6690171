package redisstore

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

	"github.com/throttle-rl/throttle/algorithms"
)

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
	Mode algorithms.FailureMode
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
	// HungAfter is how long calls must have waited on the backend with no
	// answer (from the first call sent after its last answer) before a
	// timed-out call counts as its failure. Until then a timeout is
	// Throttle's own overload (ErrOverloaded): under CPU starvation the
	// goroutine that reads a reply can wait longer than a budget to run, and
	// that must not look like an outage — nor must a master that answered
	// nothing only because nothing was asked (a replica idle for a while).
	// Connection errors count at once. Default 1s.
	HungAfter time.Duration
	// Local is the fallback store of FailLocal. Default: a new MemoryStore.
	Local *algorithms.MemoryStore
	// Registerer receives the guard's metrics. Optional.
	Registerer prometheus.Registerer
	// Now is the breaker's clock. Default time.Now.
	Now func() time.Time
}

// Guard wraps the Redis store with a deadline budget, a circuit breaker and
// a failure policy.
//
// Every call gets Redis's decision, unless Redis is really failing: a call
// that errs (connection refused, reset, a Redis error), or times out when
// calls to its master have waited HungAfter with no answer, is a failure,
// and is answered by Mode (decisions marked Degraded). A call that times out
// before that (its master answers others, or the wait has just begun) may
// have been slowed by Throttle itself (overload): it gets ErrOverloaded,
// never a guess, and does not count against Redis.
//
// The breaker weighs the last 100 calls made within BreakerWindow: it opens
// when they are at least BreakerMinCalls and at least BreakerRatio of them
// failed. (A count, not only a time span: under heavy traffic a long history
// of successes must not hide an outage for seconds.)
// While open, calls are answered by Mode at once. After OpenFor one probe at
// a time goes to Redis — a caller's call, or a PING from Run when there is no
// traffic. A probe always ends: its slot frees itself at its deadline,
// whatever happens to it. A successful probe closes the circuit; a failed one
// opens it for OpenFor again.
//
// On a Redis Cluster all of this holds per master: each has its own breaker,
// its own evidence of answering, and its own failures, so a dead master's
// keys are answered by Mode while every other master's keys are decided by
// Redis. A batch whose requests live on several masters is decided on each
// at once.
type Guard struct {
	store   *Store
	opts    GuardOptions
	metrics guardMetrics

	breakers sync.Map // *master → *breaker: one per master; added and deleted under mu
	mu       sync.Mutex
	openN    atomic.Int64 // how many breakers are open; changed under mu
}

// NewGuard guards store.
func NewGuard(store *Store, opts GuardOptions) (*Guard, error) {
	if _, err := algorithms.ParseFailureMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("redisstore: NewGuard needs a Store")
	}
	opts.setDefaults()
	g := &Guard{store: store, opts: opts}
	var err error
	g.metrics, err = newGuardMetrics(opts.Registerer, opts.Backend, store.route.cluster())
	if err != nil {
		return nil, err
	}
	return g, nil
}

// setDefaults fills in the options left out (GuardOptions says each
// default).
func (o *GuardOptions) setDefaults() {
	if o.Backend == "" {
		o.Backend = "redis"
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = DefaultCallTimeout
	}
	if o.BreakerWindow <= 0 {
		o.BreakerWindow = DefaultBreakerWindow
	}
	if o.BreakerMinCalls <= 0 || o.BreakerMinCalls > breakerCalls {
		o.BreakerMinCalls = DefaultBreakerMinCalls
	}
	if !(o.BreakerRatio > 0 && o.BreakerRatio <= 1) {
		o.BreakerRatio = DefaultBreakerRatio
	}
	if o.OpenFor <= 0 {
		o.OpenFor = DefaultBreakerOpenFor
	}
	if o.HungAfter <= 0 {
		o.HungAfter = DefaultHungAfter
	}
	if o.Mode == algorithms.FailLocal && o.Local == nil {
		o.Local = algorithms.NewMemoryStore(algorithms.MemoryOptions{})
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// breakerOf returns the breaker of sh.
func (g *Guard) breakerOf(sh *master) *breaker {
	if b, ok := g.breakers.Load(sh); ok {
		return b.(*breaker)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	b, loaded := g.breakers.LoadOrStore(sh, &breaker{sh: sh})
	if !loaded && g.metrics.shardOpen != nil {
		g.metrics.shardOpen.WithLabelValues(sh.name).Set(0)
	}
	return b.(*breaker)
}

// Check decides reqs on Redis; by the failure policy where Redis is failing
// (on a Cluster: the requests of the failing masters); or returns
// ErrOverloaded when Throttle could not get Redis's answer in time although
// Redis answers.
func (g *Guard) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return []algorithms.Decision{}, nil
	}
	p := checkPath{s: g.store, g: g}
	return p.decide(ctx, reqs)
}

// onMaster decides the requests that one master holds, through its
// breaker b within budget, or by the failure policy when b is open.
func (g *Guard) onMaster(ctx context.Context, budget time.Duration, b *breaker, reqs []algorithms.Request, last bool) ([]algorithms.Decision, error) {
	probe, allowed := g.admit(b, budget)
	if !allowed {
		return g.degrade(ctx, b, reqs)
	}
	sent := time.Now()
	deadline := sent.Add(budget)
	b.sh.sent(sent)
	ds, err := g.store.onMaster(ctx, deadline, b.sh, reqs)
	timedOut := !time.Now().Before(deadline)
	switch {
	case err == nil:
		g.record(b, true, probe)
		return ds, nil
	case errors.Is(err, algorithms.ErrInvalid):
		g.release(b, probe)
		return nil, err
	case ctx.Err() != nil:
		// The caller gave up or its deadline passed: not Redis's fault.
		g.release(b, probe)
		return nil, ctx.Err()
	case errors.Is(err, algorithms.ErrOverloaded):
		// Never sent: it waited in Throttle's own queue.
		g.release(b, probe)
		g.metrics.shed.Inc()
		return nil, err
	case !last && isRedirect(err):
		// The slot moved and the call did not run: dispatch sends it
		// again, to the slot's new master.
		g.release(b, probe)
		return nil, err
	case (timedOut || isTimeout(err)) && !g.hung(b):
		// The master has not left calls unanswered for HungAfter (it
		// answered others since, or the wait began a moment ago — on a
		// replica idle until now, too): this call's time may have gone in
		// Throttle (queues, a starved CPU: the goroutine that reads a
		// reply may wait long to run). Not Redis's failure.
		g.release(b, probe)
		g.metrics.shed.Inc()
		return nil, fmt.Errorf("no answer within the budget of %v (%v), Redis not hung: %w", budget, err, algorithms.ErrOverloaded)
	}
	g.metrics.errors.Inc()
	if g.metrics.shardErrors != nil {
		g.metrics.shardErrors.WithLabelValues(b.sh.name).Inc()
	}
	g.record(b, false, probe)
	return g.degrade(ctx, b, reqs)
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

// hung reports whether b's master has left calls unanswered for HungAfter.
func (g *Guard) hung(b *breaker) bool {
	return b.sh.hung(time.Now(), g.opts.HungAfter) && b.lastOK.Load() < b.sh.waitingSince.Load()
}

// Reset resets on the backend (and on the local fallback in FailLocal). It
// fails when the backend cannot be reached: a reset that did not happen must
// not look like one that did.
func (g *Guard) Reset(ctx context.Context, scope, identifier string, alg algorithms.Algorithm) (int, error) {
	if g.opts.Local != nil {
		if _, err := g.opts.Local.Reset(ctx, scope, identifier, alg); err != nil {
			return 0, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, max(g.opts.Timeout, time.Second))
	defer cancel()
	return g.store.Reset(cctx, scope, identifier, alg)
}

// Degraded reports whether a circuit is open now (on a Cluster: any
// master's).
func (g *Guard) Degraded() bool {
	return g.openN.Load() > 0
}

// degrade answers by the failure policy.
func (g *Guard) degrade(ctx context.Context, b *breaker, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	g.metrics.degraded.WithLabelValues(string(g.opts.Mode)).Add(float64(len(reqs)))
	if g.metrics.shardDegraded != nil && b != nil {
		g.metrics.shardDegraded.WithLabelValues(b.sh.name, string(g.opts.Mode)).Add(float64(len(reqs)))
	}
	if g.opts.Mode == algorithms.FailLocal {
		ds, err := g.opts.Local.Check(ctx, reqs)
		for i := range ds {
			ds[i].Degraded = true
		}
		return ds, err
	}
	now := time.Now()
	out := make([]algorithms.Decision, len(reqs))
	for i, r := range reqs {
		d := algorithms.Decision{Limit: r.Limit.Limit, Now: now, Degraded: true, ResetAfter: g.opts.OpenFor}
		if g.opts.Mode == algorithms.FailOpen {
			d.Allowed = true
			d.Remaining = max(0, r.Limit.Limit-r.Hits)
		} else {
			d.RetryAfter = g.opts.OpenFor
		}
		out[i] = d
	}
	return out, nil
}
