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
}

// RedisStore keeps counters in Redis, each algorithm one Lua script run with
// EVALSHA (EVAL when Redis answers NOSCRIPT), so every decision is atomic
// across any number of Throttle replicas. A batch is one pipelined round trip.
// It works with a single Redis, Sentinel or Cluster: all keys of one
// identifier share a hash tag.
type RedisStore struct {
	rdb     redis.UniversalClient
	now     func() time.Time
	scripts map[Algorithm]*redis.Script
	batch   *redis.Script // nil on Redis Cluster, where a batch spans slots
	reset   *redis.Script
	merge   *coalescer // nil unless RedisOptions.Coalesce
	// answered is when Redis last answered (Unix ns): Guard's
	// evidence that Redis is up when a call of its own times out.
	answered atomic.Int64
}

// NewRedisStore returns a store over rdb. The client should honour context
// deadlines (go-redis: Options.ContextTimeoutEnabled), so that a caller's
// deadline bounds every call. Call Close when done if opts.Coalesce is set.
func NewRedisStore(rdb redis.UniversalClient, opts RedisOptions) *RedisStore {
	s := &RedisStore{
		rdb:     rdb,
		now:     opts.Now,
		scripts: make(map[Algorithm]*redis.Script, len(Algorithms)),
		batch:   batchScript(rdb),
		reset:   redis.NewScript(resetLua),
	}
	for _, a := range Algorithms {
		s.scripts[a] = redis.NewScript(preludeLua + scriptLua(a))
	}
	if opts.Coalesce > 0 && s.batch != nil {
		if opts.MaxBatch <= 0 {
			opts.MaxBatch = 64
		}
		s.merge = newCoalescer(opts.Coalesce, opts.MaxBatch, s.decide)
	}
	return s
}

// Close stops the coalescing workers, if any. It does not close the client.
func (s *RedisStore) Close() {
	if s.merge != nil {
		s.merge.close()
	}
}

// scriptLua returns the Lua of algorithm a's script, without the prelude.
func scriptLua(a Algorithm) string {
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
	return ""
}

// batchScript returns one script that runs every algorithm's script, as a
// function named by its algCode, over a whole batch: one EVALSHA instead of
// one per request, since each script call costs far more in Redis than the
// work inside it.
// Redis Cluster gets nil: a batch's keys span slots, so each request there
// is its own EVALSHA in a pipeline.
func batchScript(rdb redis.UniversalClient) *redis.Script {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return nil
	}
	var b strings.Builder
	b.WriteString("-- Generated from prelude.lua and the script of each algorithm.\n")
	codes := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		// The scripts read the globals KEYS and ARGV; as function
		// parameters those names take one request's slice of the batch.
		codes[i] = algCode(a) + " = " + algCode(a)
		b.WriteString("local function " + algCode(a) + "(KEYS, ARGV)\n" + preludeLua + scriptLua(a) + "\nend\n")
	}
	// One TIME for the whole batch, unless the caller passed a time.
	b.WriteString("local algs = {" + strings.Join(codes, ", ") + "}\n")
	b.WriteString(`local now = ARGV[2]
if now == "" then
  local t = redis.call("TIME")
  now = string.format("%.0f", tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
local out = {}
for i = 1, #KEYS / 2 do
  local a = (i - 1) * 6
  out[i] = algs[ARGV[a + 1]]({KEYS[2 * i - 1], KEYS[2 * i]}, {now, ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]})
end
return out
`)
	return redis.NewScript(b.String())
}

// scriptArgs returns the keys and arguments of r's script. The keys share
// one prefix, built once; numbers go as strings, as Redis reads them. A
// request that is never reset (Unindexed) passes its state key twice and an
// empty member: the script then keeps no index entry for it.
func (s *RedisStore) scriptArgs(r Request, now string) (state, index string, args [5]any) {
	prefix := identityPrefix(r.Key.Scope, r.Key.Identifier)
	member := stateMember(r)
	state = prefix + member
	index = prefix + "i"
	if r.Unindexed {
		index, member = state, ""
	}
	var third string
	if r.Limit.Algorithm == TokenBucket {
		third = strconv.FormatFloat(r.Limit.Refill(), 'g', -1, 64)
	} else {
		third = strconv.FormatInt(r.Limit.Window.Microseconds(), 10)
	}
	return state, index, [5]any{now, strconv.FormatInt(r.Limit.Limit, 10), third, strconv.FormatInt(r.Hits, 10), member}
}

// Check decides the batch in one round trip (two if Redis had lost the
// scripts): one script call for the whole batch, or on Redis Cluster a
// pipeline of one call per request.
func (s *RedisStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return []Decision{}, nil
	}
	if s.merge != nil {
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

// run sends a validated batch to Redis.
func (s *RedisStore) run(ctx context.Context, reqs []Request) ([]Decision, error) {
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	if s.batch != nil && len(reqs) > 1 {
		return s.checkBatch(ctx, reqs, now)
	}
	cmds := make([]*redis.Cmd, len(reqs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range reqs {
			state, index, args := s.scriptArgs(r, now)
			cmds[i] = s.scripts[r.Limit.Algorithm].EvalSha(ctx, p, []string{state, index}, args[:]...)
		}
		return nil
	})
	if err != nil && hasNoScript(cmds) {
		// Redis restarted or SCRIPT FLUSH: send the scripts themselves for
		// the requests that missed. EVAL caches them for the next batch.
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range reqs {
				if isNoScript(cmds[i].Err()) {
					state, index, args := s.scriptArgs(r, now)
					cmds[i] = s.scripts[r.Limit.Algorithm].Eval(ctx, p, []string{state, index}, args[:]...)
				}
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	out := make([]Decision, len(reqs))
	for i, c := range cmds {
		d, err := parseDecision(c, reqs[i].Limit.Limit)
		if err != nil {
			return nil, fmt.Errorf("redis: request %d: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

// checkBatch decides reqs in one script call.
func (s *RedisStore) checkBatch(ctx context.Context, reqs []Request, now string) ([]Decision, error) {
	keys := make([]string, 0, 2*len(reqs))
	args := make([]any, 0, 6*len(reqs))
	for _, r := range reqs {
		state, index, a := s.scriptArgs(r, now)
		keys = append(keys, state, index)
		args = append(args, algCode(r.Limit.Algorithm))
		args = append(args, a[:]...)
	}
	res, err := s.batch.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if len(res) != len(reqs) {
		return nil, fmt.Errorf("redis: batch script returned %d decisions for %d requests", len(res), len(reqs))
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
		out[i] = newDecision(n, reqs[i].Limit.Limit)
	}
	return out, nil
}

// parseDecision turns a script's reply {allowed, remaining, reset_us,
// retry_us, now_us} into a Decision.
func parseDecision(c *redis.Cmd, limit int64) (Decision, error) {
	vals, err := c.Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	if len(vals) != 5 {
		return Decision{}, fmt.Errorf("script returned %d values, want 5", len(vals))
	}
	return newDecision([5]int64(vals), limit), nil
}

func newDecision(v [5]int64, limit int64) Decision {
	return Decision{
		Allowed:    v[0] == 1,
		Limit:      limit,
		Remaining:  v[1],
		ResetAfter: time.Duration(v[2]) * time.Microsecond,
		RetryAfter: time.Duration(v[3]) * time.Microsecond,
		Now:        time.UnixMicro(v[4]),
	}
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
