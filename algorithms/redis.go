package algorithms

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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
)

// RedisOptions configures a RedisStore. Every field is optional.
type RedisOptions struct {
	// Now, when set, is passed to the scripts as the time instead of Redis
	// TIME. Only tests set it, to be exact; in production every replica must
	// use Redis's clock so that skewed hosts agree.
	Now func() time.Time
	// Coalesce, when > 0, runs that many workers that merge the batches of
	// concurrent Check calls into one script call (up to MaxBatch requests):
	// under load one round trip then decides many callers. Close stops the
	// workers. Ignored on Redis Cluster. Default 0: every Check is its own call.
	Coalesce int
	// MaxBatch bounds a merged call. Default 64.
	MaxBatch int
	// TracerProvider makes the spans of Redis calls ("redis.check",
	// "redis.batch"; see trace.go), children of the caller's span. Default
	// nil: no spans, nothing spent on tracing.
	TracerProvider trace.TracerProvider
}

// RedisStore keeps counters in Redis. One Lua script, run with EVALSHA (EVAL
// when Redis answers NOSCRIPT), decides a batch of requests, each by its
// algorithm's function, so every decision is atomic across any number of
// Throttle replicas, and a batch is one round trip. It works with a single
// Redis, Sentinel or Cluster: all keys of one identifier share a hash tag;
// on Cluster a batch is a pipeline of one script call per request.
type RedisStore struct {
	rdb     redis.UniversalClient
	now     func() time.Time
	script  *redis.Script
	cluster bool // a batch's keys span slots: one call per request
	reset   *redis.Script
	merge   *coalescer // nil unless RedisOptions.Coalesce
	// answered is when Redis last answered (Unix ns): Guard's
	// evidence that Redis is up when a call of its own times out.
	answered atomic.Int64
	// tracer makes the spans of trace.go; nil: none.
	tracer trace.Tracer
}

// NewRedisStore returns a store over rdb. The client should honour context
// deadlines (go-redis: Options.ContextTimeoutEnabled), so that a caller's
// deadline bounds every call. Call Close when done if opts.Coalesce is set.
func NewRedisStore(rdb redis.UniversalClient, opts RedisOptions) *RedisStore {
	_, cluster := rdb.(*redis.ClusterClient)
	s := &RedisStore{
		rdb:     rdb,
		now:     opts.Now,
		script:  redis.NewScript(throttleScript()),
		cluster: cluster,
		reset:   redis.NewScript(resetLua),
	}
	if opts.Coalesce > 0 && !cluster {
		if opts.MaxBatch <= 0 {
			opts.MaxBatch = 64
		}
		s.merge = newCoalescer(opts.Coalesce, opts.MaxBatch, s.decide)
	}
	if s.tracer = Tracer(opts.TracerProvider, tracerName); s.tracer != nil && s.merge != nil {
		s.merge.tracer = s.tracer
	}
	return s
}

// Close stops the coalescing workers, if any. It does not close the client.
func (s *RedisStore) Close() {
	if s.merge != nil {
		s.merge.close()
	}
}

// throttleScript is the one script: the prelude, a function per algorithm,
// and batch.lua, which calls them for each request of a batch.
func throttleScript() string {
	var b strings.Builder
	b.WriteString(preludeLua)
	for _, a := range Algorithms {
		b.WriteString(algorithmLua(a))
	}
	b.WriteString(batchLua)
	return b.String()
}

// algorithmLua returns the Lua function of algorithm a.
func algorithmLua(a Algorithm) string {
	switch a {
	case FixedWindow:
		return fixedWindowLua
	case SlidingWindow:
		return slidingWindowLua
	case TokenBucket:
		return tokenBucketLua
	case GCRA:
		return gcraLua
	}
	panic("algorithms: no script for " + string(a)) // Algorithms lists only those above
}

// appendArgs appends r's keys and its five arguments of batch.lua. The
// keys share one prefix, built once; numbers go as strings, as Redis reads
// them. A request that is never reset (Unindexed) passes its state key as
// its index and an empty member: the script then keeps no index for it.
func appendArgs(keys []string, args []any, r Request) ([]string, []any) {
	prefix := identityPrefix(r.Key.Scope, r.Key.Identifier)
	member := stateMember(r)
	state, index := prefix+member, prefix+"i"
	if r.Unindexed {
		index, member = state, ""
	}
	var third string
	if r.Limit.Algorithm == TokenBucket {
		third = strconv.FormatFloat(r.Limit.Refill(), 'g', -1, 64)
	} else {
		third = strconv.FormatInt(r.Limit.Window.Microseconds(), 10)
	}
	return append(keys, state, index),
		append(args, algCode(r.Limit.Algorithm), strconv.FormatInt(r.Limit.Limit, 10), third, strconv.FormatInt(r.Hits, 10), member)
}

// Check decides the batch in one round trip (two if Redis had lost the
// scripts): one script call for the whole batch, or on Redis Cluster a
// pipeline of one call per request.
func (s *RedisStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	return s.checkValid(ctx, reqs)
}

// checkValid is Check of a batch its caller has validated (Guard).
func (s *RedisStore) checkValid(ctx context.Context, reqs []Request) ([]Decision, error) {
	if len(reqs) == 0 {
		return []Decision{}, nil
	}
	if s.tracer != nil {
		return s.tracedCheck(ctx, reqs)
	}
	if s.merge != nil {
		// Hand the batch to a coalescing worker's goroutine: the checks
		// that arrive while a script call is in flight leave together in
		// the next one, so under load one round trip decides many callers,
		// and an idle store waits for nothing (a worker takes the first at
		// once).
		return s.merge.check(ctx, reqs)
	}
	return s.decide(ctx, reqs)
}

// LastAnswer returns when Redis last answered a check or a Ping; zero if never.
func (s *RedisStore) LastAnswer() time.Time {
	if ns := s.answered.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// decide runs a validated batch on Redis.
func (s *RedisStore) decide(ctx context.Context, reqs []Request) ([]Decision, error) {
	ds, err := s.run(ctx, reqs)
	if err == nil {
		s.answered.Store(time.Now().UnixNano())
	}
	return ds, err
}

// run sends a validated batch to Redis: one script call, or on Redis
// Cluster a pipeline of one call per request.
func (s *RedisStore) run(ctx context.Context, reqs []Request) ([]Decision, error) {
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	if !s.cluster {
		keys := make([]string, 0, 2*len(reqs))
		args := make([]any, 1, 1+5*len(reqs))
		args[0] = now
		for _, r := range reqs {
			keys, args = appendArgs(keys, args, r)
		}
		res, err := s.script.Run(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		return parseDecisions(res, reqs)
	}
	cmds := make([]*redis.Cmd, len(reqs))
	send := func(p redis.Pipeliner, i int, eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) {
		keys, args := appendArgs(make([]string, 0, 2), append(make([]any, 0, 6), now), reqs[i])
		cmds[i] = eval(ctx, p, keys, args...)
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range reqs {
			send(p, i, s.script.EvalSha)
		}
		return nil
	})
	if err != nil && hasNoScript(cmds) {
		// Redis restarted or SCRIPT FLUSH: send the script itself for the
		// requests that missed. EVAL caches it for the next batch.
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range reqs {
				if isNoScript(cmds[i].Err()) {
					send(p, i, s.script.Eval)
				}
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	res := make([]any, len(reqs))
	for i, c := range cmds {
		// Each call decided a batch of one.
		r, err := c.Slice()
		if err != nil {
			return nil, fmt.Errorf("redis: request %d: %w", i, err)
		}
		if len(r) != 1 {
			return nil, fmt.Errorf("redis: request %d: script returned %d decisions for 1 request", i, len(r))
		}
		res[i] = r[0]
	}
	return parseDecisions(res, reqs)
}

// parseDecisions turns the script's replies, one {allowed, remaining,
// reset_us, retry_us, now_us} per request, into decisions.
func parseDecisions(res []any, reqs []Request) ([]Decision, error) {
	if len(res) != len(reqs) {
		return nil, fmt.Errorf("redis: script returned %d decisions for %d requests", len(res), len(reqs))
	}
	out := make([]Decision, len(reqs))
	for i, v := range res {
		vals, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("redis: request %d: unexpected reply %T", i, v)
		}
		var n [5]int64
		if len(vals) != len(n) {
			return nil, fmt.Errorf("redis: request %d: script returned %d values, want 5", i, len(vals))
		}
		for j, x := range vals {
			if n[j], ok = x.(int64); !ok {
				return nil, fmt.Errorf("redis: request %d: value %d is %T, not an integer", i, j, x)
			}
		}
		out[i] = Decision{
			Allowed:    n[0] == 1,
			Limit:      reqs[i].Limit.Limit,
			Remaining:  n[1],
			ResetAfter: time.Duration(n[2]) * time.Microsecond,
			RetryAfter: time.Duration(n[3]) * time.Microsecond,
			Now:        time.UnixMicro(n[4]),
		}
	}
	return out, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func hasNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c != nil && isNoScript(c.Err()) {
			return true
		}
	}
	return false
}

// Reset deletes the state keys of (scope, identifier) that its index lists —
// no keyspace scan, no prefix match — and returns how many existed.
func (s *RedisStore) Reset(ctx context.Context, scope, identifier string, alg Algorithm) (int, error) {
	if alg != "" {
		if _, err := ParseAlgorithm(string(alg)); err != nil {
			return 0, err
		}
	}
	n, err := s.reset.Run(ctx, s.rdb, []string{indexKey(scope, identifier)}, identityPrefix(scope, identifier), algCode(alg)).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("redis: reset: %w", err)
	}
	return n, nil
}

// Ping checks that Redis answers.
func (s *RedisStore) Ping(ctx context.Context) error {
	err := s.rdb.Ping(ctx).Err()
	if err == nil {
		s.answered.Store(time.Now().UnixNano())
	}
	return err
}
