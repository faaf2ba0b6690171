package algorithms

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
	//go:embed reset.lua
	resetLua string
)

// RedisOptions configures a RedisStore. Every field is optional.
type RedisOptions struct {
	// Now, when set, is passed to the scripts as the time instead of Redis
	// TIME. Only tests set it, to be exact; in production every replica must
	// use Redis's clock so that skewed hosts agree.
	Now func() time.Time
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
	reset   *redis.Script
}

// NewRedisStore returns a store over rdb.
func NewRedisStore(rdb redis.UniversalClient, opts RedisOptions) *RedisStore {
	return &RedisStore{
		rdb: rdb,
		now: opts.Now,
		scripts: map[Algorithm]*redis.Script{
			FixedWindow:   redis.NewScript(fixedWindowLua),
			SlidingWindow: redis.NewScript(slidingWindowLua),
			TokenBucket:   redis.NewScript(tokenBucketLua),
		},
		reset: redis.NewScript(resetLua),
	}
}

// scriptArgs returns the keys and arguments of r's script.
func (s *RedisStore) scriptArgs(r Request, now string) ([]string, []any) {
	keys := []string{stateKey(r), indexKey(r.Key.Scope, r.Key.Identifier)}
	var third string
	if r.Limit.Algorithm == TokenBucket {
		third = strconv.FormatFloat(r.Limit.Refill(), 'g', -1, 64)
	} else {
		third = strconv.FormatInt(r.Limit.Window.Microseconds(), 10)
	}
	return keys, []any{now, r.Limit.Limit, third, r.Hits, stateMember(r)}
}

// Check decides the batch in one pipelined round trip (two if Redis had lost
// the scripts).
func (s *RedisStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	if err := validateBatch(reqs); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return []Decision{}, nil
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	cmds := make([]*redis.Cmd, len(reqs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range reqs {
			keys, args := s.scriptArgs(r, now)
			cmds[i] = s.scripts[r.Limit.Algorithm].EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	if err != nil && hasNoScript(cmds) {
		// Redis restarted or SCRIPT FLUSH: send the scripts themselves for
		// the requests that missed. EVAL caches them for the next batch.
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range reqs {
				if isNoScript(cmds[i].Err()) {
					keys, args := s.scriptArgs(r, now)
					cmds[i] = s.scripts[r.Limit.Algorithm].Eval(ctx, p, keys, args...)
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
	return Decision{
		Allowed:    vals[0] == 1,
		Limit:      limit,
		Remaining:  vals[1],
		ResetAfter: time.Duration(vals[2]) * time.Microsecond,
		RetryAfter: time.Duration(vals[3]) * time.Microsecond,
		Now:        time.UnixMicro(vals[4]),
	}, nil
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
	return s.rdb.Ping(ctx).Err()
}
