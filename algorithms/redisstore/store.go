package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
)

// globalFirstTimeout bounds the global Redis's approximate calls until
// the first answer tells its round trip: a connection's handshake across
// regions (TCP, HELLO, SELECT, the call) is four round trips or more.
const globalFirstTimeout = 2 * time.Second

// Options configures a Store. Every field is optional.
type Options struct {
	// Now, when set, is passed to the scripts as the time instead of Redis
	// TIME. Only tests set it, to be exact; in production every replica must
	// use Redis's clock so that skewed hosts agree.
	Now func() time.Time
	// Coalesce, when > 0, runs that many workers per Redis master that merge
	// the batches of concurrent Check calls into one call (up to MaxBatch
	// requests): under load one round trip then decides many callers. One
	// call is out at a time; another leaves beside it once it has been out
	// for a millisecond (a slow round trip does not hold the rest back).
	// Close stops the workers. Default 0: every Check is its own call (on a
	// Cluster, one per master it touches).
	Coalesce int
	// MaxBatch bounds a merged call. Default 64.
	MaxBatch int
	// KeyPrefix is put before every key Throttle writes (the reference
	// service's CACHE_KEY_PREFIX), so that several deployments can share
	// one Redis or Cluster. Default "".
	KeyPrefix string
	// ApproximateInterval is how often approximate limits sync with Redis
	// (APPROXIMATE_SYNC_INTERVAL). Default DefaultApproximateInterval.
	ApproximateInterval time.Duration
	// ExpirationJitter, when > 0, adds a random duration below it to the
	// TTL of each window counter the count-first regime makes (plain.go:
	// the Envoy path's fixed and sliding windows), so that the counters of
	// one window do not all expire at once (the reference service's
	// EXPIRATION_JITTER_MAX_SECONDS). A counter outlives its window longer
	// (memory), never shorter. The scripts' keys keep their exact TTLs.
	// Default 0: none.
	ExpirationJitter time.Duration
	// ApproximateMaxKeys bounds the approximate limits held at once; past
	// it a new one is decided exactly. Default DefaultApproximateMaxKeys.
	ApproximateMaxKeys int
	// Global says this is the global Redis (GLOBAL_REDIS_URL), which
	// counts the limits of scope global for every region: its approximate
	// limits' metrics are named throttle_global_* rather than
	// throttle_approximate_*, so that both stores of a process have their
	// own. Its leases are sized for its round trip as every store's are.
	Global bool
	// HoldSweepEvery is how often the store gives back the holds that
	// expired in Redis, whoever made them (holds.go). Default
	// DefaultHoldSweepEvery; < 0: never (tests that sweep by hand).
	HoldSweepEvery time.Duration
	// Tracer makes the spans of Redis calls ("redis.check",
	// "redis.batch"; see trace.go), children of the caller's span. Default
	// nil: no spans, nothing spent on tracing.
	Tracer trace.Tracer
}

// Store keeps counters in Redis, so every Throttle replica enforces one
// shared limit. It works with a single Redis, Sentinel or Cluster. The
// package doc names the stages a request goes through.
type Store struct {
	rdb redis.UniversalClient
	now func() time.Time
	// library is the engine as a function library; batchFn, settleFn and
	// sweepFn its functions (each with its script form, where functions
	// cannot be loaded).
	library                            string
	batchFn, settleFn, sweepFn, heldFn luaFn
	reset                              *redis.Script
	clear                              *redis.Script
	refund                             *redis.Script // refundVoided (Cluster), refundPlain
	route                              *router       // the master of each key: one, or a Cluster's
	opts                               Options
	// tracer makes the spans of trace.go; nil: none.
	tracer trace.Tracer
	// approx holds the approximate limits, syncer syncs them
	// (approx.go, approxsync.go).
	approx        *approxTable
	syncer        *approxSyncer
	approxMetrics *approxMetrics
	// holdMetrics measures the sweeper of holds; sweepStop stops it,
	// sweepDone says it stopped (holds.go).
	holdMetrics          *holdMetrics
	sweepStop, sweepDone chan struct{}
	closeOnce            sync.Once
}

// New returns a store over rdb. The client should honour context
// deadlines (go-redis: Options.ContextTimeoutEnabled), so that a caller's
// deadline bounds every call. Call Close when done: it stops the coalescing
// workers and, on a Cluster, the slot table's refreshes and the masters'
// clients the store made (not rdb itself).
func New(rdb redis.UniversalClient, opts Options) *Store {
	opts.setDefaults()
	s := &Store{
		rdb:    rdb,
		now:    opts.Now,
		reset:  redis.NewScript(forgetLua + resetLua),
		refund: redis.NewScript(refundLua),
		clear:  redis.NewScript(forgetLua + clearLua),
		opts:   opts,
		tracer: opts.Tracer,
	}
	var version string
	s.library, version = luaLibrary()
	script := func(call string) *redis.Script { return redis.NewScript(luaCode() + call) }
	if _, ok := rdb.(*redis.ClusterClient); ok {
		// Each master's call may touch keys of several of its slots.
		script = func(call string) *redis.Script { return redis.NewScript(crossSlot + luaCode() + call) }
	}
	s.batchFn = luaFn{"throttle_batch_" + version, script(evalCall)}
	s.settleFn = luaFn{"throttle_settle_" + version, script(settleCall)}
	s.sweepFn = luaFn{"throttle_sweep_" + version, script(sweepCall)}
	s.heldFn = luaFn{"throttle_held_" + version, script(heldCall)}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// Reset and Clear mark holds in their master's index of holds.
		s.reset = redis.NewScript(crossSlot + forgetLua + resetLua)
		s.clear = redis.NewScript(crossSlot + forgetLua + clearLua)
		s.refund = redis.NewScript(crossSlot + refundLua)
		s.route = newClusterRouter(cc, s.indexKey, func(name string, c *redis.Client) *master {
			return s.newMaster(name, c, func(ctx context.Context) error { return clusterReady(ctx, c) }, c.Close)
		})
	} else {
		one := s.newMaster("", rdb, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, func() error { return nil })
		s.route = newSingleRouter(one, s.indexKey)
	}
	s.approx = newApproxTable(opts.ApproximateInterval, opts.ApproximateMaxKeys, opts.Now)
	prefix := approxMetricPrefix
	if opts.Global {
		prefix = globalMetricPrefix
		s.approx.firstTimeout = globalFirstTimeout
	}
	s.approxMetrics = newApproxMetrics(s.approx, prefix)
	s.syncer = newApproxSyncer(s, s.approx, s.approxMetrics)
	if opts.Global {
		// Every limit of the global Redis is approximate, and a replica
		// decides them from memory only once it has read the registry of
		// replicas: read it from the start, not at the first decision
		// (until its first answer, one wide-area round trip and more, the
		// decisions are exact, on the global Redis).
		s.syncer.ensure()
	}
	s.holdMetrics = newHoldMetrics()
	s.sweepStop, s.sweepDone = make(chan struct{}), make(chan struct{})
	if opts.HoldSweepEvery > 0 {
		go s.runSweeper(opts.HoldSweepEvery, s.sweepStop, s.sweepDone)
	} else {
		close(s.sweepDone)
	}
	return s
}

// setDefaults fills in the options left out (Options says each default).
func (o *Options) setDefaults() {
	if o.Coalesce > 0 && o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	if o.ApproximateInterval <= 0 {
		o.ApproximateInterval = DefaultApproximateInterval
	}
	if o.ApproximateMaxKeys <= 0 {
		o.ApproximateMaxKeys = DefaultApproximateMaxKeys
	}
	if o.HoldSweepEvery == 0 {
		o.HoldSweepEvery = DefaultHoldSweepEvery
	}
}

// RegisterMetrics registers the store's metrics (approximate limits,
// decisions by accuracy, the sweeper of holds) on reg.
func (s *Store) RegisterMetrics(reg prometheus.Registerer) error {
	return errors.Join(s.approxMetrics.register(reg), s.holdMetrics.register(reg))
}

// Drain sends the pending hits of approximate limits to Redis within ctx,
// stops their syncs and takes this replica out of their registry: the
// first step of a shutdown. Decisions made after it are not synced.
func (s *Store) Drain(ctx context.Context) error {
	return s.syncer.drain(ctx)
}

// Close drains the approximate limits (Drain, within a second, unless
// done), stops the sweeper of holds, the coalescing workers, if any, and on
// a Cluster the slot table's refreshes and the masters' clients. It does
// not close rdb.
func (s *Store) Close() {
	s.closeOnce.Do(func() { close(s.sweepStop) })
	<-s.sweepDone
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	s.Drain(ctx) // unless done already; what it cannot send is lost
	cancel()
	s.route.close()
}

// Check decides the batch in one round trip per Redis master it touches
// (two if Redis had lost the script).
func (s *Store) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return []algorithms.Decision{}, nil
	}
	p := checkPath{s: s}
	return p.decide(ctx, reqs)
}

// decide runs a validated batch on one master: the requests of
// callers (sizes: each caller's count, nil for one caller) in one script
// call.
func (s *Store) decide(ctx context.Context, sh *master, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
	if sh.client == nil {
		return nil, errNoMaster
	}
	plain, scripted := splitPlain(reqs, sizes)
	switch {
	case scripted == nil:
		return s.decidePlain(ctx, sh, reqs, sizes)
	case plain == nil:
		return s.decideScripted(ctx, sh, reqs, sizes)
	}
	// Both: at once, each on its own round trip.
	preqs, psizes := subBatch(reqs, sizes, plain)
	sreqs, ssizes := subBatch(reqs, sizes, scripted)
	var pds []algorithms.Decision
	var perr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		pds, perr = s.decidePlain(ctx, sh, preqs, psizes)
	}()
	sds, serr := s.decideScripted(ctx, sh, sreqs, ssizes)
	<-done
	if err := errors.Join(perr, serr); err != nil {
		return nil, err
	}
	out := make([]algorithms.Decision, len(reqs))
	putBack(out, plain, pds)
	putBack(out, scripted, sds)
	return out, nil
}

// decideScripted runs a validated batch on one master in one
// script call.
func (s *Store) decideScripted(ctx context.Context, sh *master, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
	keys, args := s.scriptArgs(reqs, sizes, s.nowArg())
	res, err := s.runBatch(ctx, sh, keys, args).Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	sh.answered.Store(time.Now().UnixNano())
	return decodeReply(res, reqs, sizes)
}

// nowArg is the time the scripts take: "" for Redis TIME, the clock every
// replica shares; µs of Options.Now in tests.
func (s *Store) nowArg() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}

// Reset deletes the state keys of (scope, identifier) that its index lists —
// no keyspace scan, no prefix match — and returns how many existed.
func (s *Store) Reset(ctx context.Context, scope, identifier string, alg algorithms.Algorithm) (int, error) {
	if alg != "" {
		if _, err := algorithms.ParseAlgorithm(string(alg)); err != nil {
			return 0, err
		}
	}
	if s.approx.forget(scope, identifier, alg) {
		s.syncer.awaitSends()
	}
	index := s.indexKey(scope, identifier)
	var n int
	err := s.route.onKey(ctx, index, func(sh *master) error {
		var err error
		n, err = s.reset.Run(ctx, sh.client, []string{index}, s.identityPrefix(scope, identifier), alg.Tag(), s.nowArg(), s.holdIndex(index)).Int()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redis: reset: %w", err)
	}
	return n, nil
}

// Ping checks that Redis answers: on a Cluster, every master that serves
// slots (after reading the slot table).
func (s *Store) Ping(ctx context.Context) error {
	if !s.route.refresh(ctx, time.Now()) {
		return fmt.Errorf("redis cluster: no slot table: %w", errNoMaster)
	}
	masters, errs := s.route.each(ctx, pingMaster)
	for i, sh := range masters {
		if errs[i] != nil && sh.name != "" {
			errs[i] = fmt.Errorf("%s: %w", sh.name, errs[i])
		}
	}
	return errors.Join(errs...)
}
