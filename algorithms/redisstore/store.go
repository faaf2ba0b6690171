package redisstore

import (
	"github.com/throttle-rl/throttle/algorithms"

	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
	//go:embed gcra.lua
	gcraLua string
	//go:embed batch.lua
	batchLua string
	//go:embed reset.lua
	resetLua string
	//go:embed clear.lua
	clearLua string
	//go:embed refund.lua
	refundLua string
)

// crossSlot lets a script touch keys of several slots of one Cluster
// master (Redis 7).
const crossSlot = "#!lua flags=allow-cross-slot-keys\n"

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
	// Tracer makes the spans of Redis calls ("redis.check",
	// "redis.batch"; see trace.go), children of the caller's span. Default
	// nil: no spans, nothing spent on tracing.
	Tracer trace.Tracer
}

// RedisStore keeps counters in Redis. One Lua script, run with EVALSHA (EVAL
// when Redis answers NOSCRIPT), decides a batch of requests, each by its
// algorithm's function, so every decision is atomic across any number of
// Throttle replicas, and a batch is one round trip. It works with a single
// Redis, Sentinel or Cluster: all keys of one identifier share a hash tag;
// on a Cluster the store routes each request to its slot's master itself
// (cluster.go) and a batch is one script call per master it touches (the
// script may touch keys of several slots of its master: Redis 7's
// allow-cross-slot-keys).
type Store struct {
	rdb    redis.UniversalClient
	now    func() time.Time
	script *redis.Script // the engine as a script: where functions cannot be loaded
	// library is the engine as a function library, function its name.
	library, function string
	reset             *redis.Script
	clear             *redis.Script
	refund            *redis.Script  // refundVoided (Cluster), refundPlain
	single            *shard         // a single Redis, or Sentinel's master; nil on a Cluster
	cluster           *clusterRouter // nil unless a Cluster
	opts              Options
	// tracer makes the spans of trace.go; nil: none.
	tracer trace.Tracer
}

// New returns a store over rdb. The client should honour context
// deadlines (go-redis: Options.ContextTimeoutEnabled), so that a caller's
// deadline bounds every call. Call Close when done: it stops the coalescing
// workers and, on a Cluster, the slot table's refreshes and the masters'
// clients the store made (not rdb itself).
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Coalesce > 0 && opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	s := &Store{
		rdb:    rdb,
		now:    opts.Now,
		script: redis.NewScript(luaCode() + evalCall),
		reset:  redis.NewScript(resetLua),
		refund: redis.NewScript(refundLua),
		clear:  redis.NewScript(clearLua),
		opts:   opts,
		tracer: opts.Tracer,
	}
	s.library, s.function = luaLibrary()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// Each master's call may touch keys of several of its slots.
		s.script = redis.NewScript(crossSlot + luaCode() + evalCall)
		s.clear = redis.NewScript(crossSlot + clearLua)
		s.refund = redis.NewScript(crossSlot + refundLua)
		s.cluster = newClusterRouter(cc, func(name string, c *redis.Client) *shard {
			return s.newShard(name, c, func(ctx context.Context) error { return clusterReady(ctx, c) }, c.Close)
		})
	} else {
		s.single = s.newShard("", rdb, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, func() error { return nil })
	}
	return s
}

func (s *Store) newShard(name string, c redis.Cmdable, ping func(context.Context) error, close func() error) *shard {
	sh := &shard{name: name, client: c, ping: ping, close: close}
	if s.opts.Coalesce > 0 {
		sh.merge = newCoalescer(s.opts.Coalesce, s.opts.MaxBatch, overlapAfter, func(ctx context.Context, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
			return s.decide(ctx, sh, reqs, sizes)
		})
		sh.merge.tracer = s.tracer
	}
	return sh
}

// Close stops the coalescing workers, if any, and on a Cluster the slot
// table's refreshes and the masters' clients. It does not close rdb.
func (s *Store) Close() {
	if s.cluster != nil {
		s.cluster.close()
		return
	}
	if s.single.merge != nil {
		s.single.merge.close()
	}
}

// luaCode is the engine's Lua: the prelude, a function per algorithm, and
// batch.lua's batch, which calls them for each request of a batch.
func luaCode() string {
	var b strings.Builder
	b.WriteString(preludeLua)
	for _, a := range algorithms.Algorithms {
		b.WriteString(algorithmLua(a))
	}
	b.WriteString(batchLua)
	return b.String()
}

// algorithmLua returns the Lua function of algorithm a.
func algorithmLua(a algorithms.Algorithm) string {
	switch a {
	case algorithms.FixedWindow:
		return fixedWindowLua
	case algorithms.SlidingWindow:
		return slidingWindowLua
	case algorithms.TokenBucket:
		return tokenBucketLua
	case algorithms.GCRA:
		return gcraLua
	}
	panic("algorithms: no script for " + string(a)) // Algorithms lists only those above
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
	return s.dispatch(ctx, reqs, func(ctx context.Context, sh *shard, reqs []algorithms.Request, _ bool) ([]algorithms.Decision, error) {
		return s.onShard(ctx, time.Time{}, sh, reqs)
	})
}

// shardCheck decides a part of a batch that one shard holds; last is false
// when a redirect will be followed (dispatch sends the part once more).
type shardCheck func(ctx context.Context, sh *shard, reqs []algorithms.Request, last bool) ([]algorithms.Decision, error)

// dispatch decides a validated, non-empty batch: each part on its shard with
// check, the parts at once. A part whose master answered a redirect (a slot
// moved: failover, resharding) did not run; it is routed again on a fresh
// slot table and sent once more.
func (s *Store) dispatch(ctx context.Context, reqs []algorithms.Request, check shardCheck) ([]algorithms.Decision, error) {
	if s.cluster == nil {
		return check(ctx, s.single, reqs, true)
	}
	s.cluster.ready(ctx)
	var out []algorithms.Decision
	var at []int // the positions still to decide; nil: all
	for attempt := 0; ; attempt++ {
		last := attempt > 0
		sent := time.Now()
		parts := s.split(reqs, at)
		if len(parts) == 1 && at == nil {
			ds, err := check(ctx, parts[0].sh, reqs, last)
			if last || !isRedirect(err) {
				return ds, err
			}
		} else {
			if out == nil {
				out = make([]algorithms.Decision, len(reqs))
			}
			errs := s.onParts(ctx, parts, check, last, out)
			var failed error
			at = at[:0]
			for i, err := range errs {
				switch {
				case err == nil:
				case !last && isRedirect(err):
					at = append(at, parts[i].at...)
				default:
					failed = errors.Join(failed, err)
				}
			}
			if failed != nil {
				// What other parts counted stays counted: they were
				// asked, and a caller that retries is over-counted,
				// never under.
				return nil, failed
			}
			if len(at) == 0 {
				s.refundVoided(ctx, reqs, out)
				return out, nil
			}
		}
		if at == nil {
			at = make([]int, len(reqs))
			for i := range at {
				at[i] = i
			}
		}
		s.cluster.refresh(ctx, sent)
	}
}

// onParts decides each part on its shard, all at once, writes the decisions
// into out at their positions, and returns each part's error.
func (s *Store) onParts(ctx context.Context, parts []part, check shardCheck, last bool, out []algorithms.Decision) []error {
	errs := make([]error, len(parts))
	run := func(i int) {
		p := parts[i]
		ds, err := check(ctx, p.sh, p.reqs, last)
		if err != nil {
			errs[i] = err
			return
		}
		for j, at := range p.at {
			out[at] = ds[j]
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < len(parts); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(i)
		}()
	}
	run(0)
	wg.Wait()
	return errs
}

// part is the requests of a batch that one shard holds, and their positions.
type part struct {
	sh   *shard
	reqs []algorithms.Request
	at   []int
}

// split groups the requests of a batch at positions at (nil: all) by the
// master of each one's slot.
func (s *Store) split(reqs []algorithms.Request, at []int) []part {
	var parts []part
	add := func(i int) {
		r := reqs[i]
		sh := s.cluster.shardOf(s.indexKey(r.Key.Scope, r.Key.Identifier))
		j := 0
		for j < len(parts) && parts[j].sh != sh {
			j++
		}
		if j == len(parts) {
			parts = append(parts, part{sh: sh})
		}
		parts[j].reqs = append(parts[j].reqs, r)
		parts[j].at = append(parts[j].at, i)
	}
	if at == nil {
		for i := range reqs {
			add(i)
		}
	}
	for _, i := range at {
		add(i)
	}
	return parts
}

// onShard decides a validated batch that one shard holds: through its
// coalescing workers when there are some (the checks that arrive while a
// script call is in flight leave together in the next one, so under load one
// round trip decides many callers, and an idle store waits for nothing: a
// worker takes the first at once), in a span when tracing. It gives up at
// deadline, if not zero, or when ctx ends.
func (s *Store) onShard(ctx context.Context, deadline time.Time, sh *shard, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	ctx, end := s.traceCheck(ctx, sh, reqs)
	var ds []algorithms.Decision
	var err error
	switch {
	case sh.merge != nil:
		ds, err = sh.merge.check(ctx, deadline, reqs)
	case !deadline.IsZero():
		dctx, cancel := context.WithDeadline(ctx, deadline)
		ds, err = s.decide(dctx, sh, reqs, nil)
		cancel()
	default:
		ds, err = s.decide(ctx, sh, reqs, nil)
	}
	end(err)
	return ds, err
}

// decide runs a validated batch on one shard's master: the requests of
// callers (sizes: each caller's count, nil for one caller) in one script
// call.
func (s *Store) decide(ctx context.Context, sh *shard, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
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
	for j, i := range plain {
		out[i] = pds[j]
	}
	for j, i := range scripted {
		out[i] = sds[j]
	}
	return out, nil
}

// decideScripted runs a validated batch on one shard's master in one
// script call.
func (s *Store) decideScripted(ctx context.Context, sh *shard, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
	keys, args := s.scriptArgs(reqs, sizes, s.nowArg(), s.cluster != nil)
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
	index := s.indexKey(scope, identifier)
	reset := func(c redis.Cmdable) (int, error) {
		n, err := s.reset.Run(ctx, c, []string{index}, s.identityPrefix(scope, identifier), alg.Tag(), s.nowArg()).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("redis: reset: %w", err)
		}
		return n, nil
	}
	if s.cluster == nil {
		return reset(s.rdb)
	}
	s.cluster.ready(ctx)
	sent := time.Now()
	sh := s.cluster.shardOf(index)
	if sh.client == nil {
		return 0, fmt.Errorf("redis: reset: %w", errNoMaster)
	}
	n, err := reset(sh.client)
	if isRedirect(err) && s.cluster.refresh(ctx, sent) {
		if sh = s.cluster.shardOf(index); sh.client != nil {
			n, err = reset(sh.client)
		}
	}
	return n, err
}

// Ping checks that Redis answers: on a Cluster, every master that serves
// slots (after reading the slot table).
func (s *Store) Ping(ctx context.Context) error {
	if s.cluster == nil {
		return pingShard(ctx, s.single)
	}
	if !s.cluster.refresh(ctx, time.Now()) {
		return fmt.Errorf("redis cluster: no slot table: %w", errNoMaster)
	}
	var errs []error
	for _, sh := range s.cluster.masters() {
		if err := pingShard(ctx, sh); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sh.name, err))
		}
	}
	return errors.Join(errs...)
}

// pingShard PINGs one master and notes its answer.
func pingShard(ctx context.Context, sh *shard) error {
	err := sh.ping(ctx)
	if err == nil {
		sh.answered.Store(time.Now().UnixNano())
	}
	return err
}
