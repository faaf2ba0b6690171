// Package idempotency keeps the replies of idempotent REST checks
// (restapi.IdempotencyStore) in Redis, so every replica behind one Redis
// answers a retried Idempotency-Key alike.
//
// Records live under their own prefix, apart from counters:
// "<prefix>throttle:idem:{<client>}:<key>", each with a time to live. A
// claim is SET NX. Each client also has an index of its kept replies
// ("…:{<client>}#index", by expiry) and their sizes ("…#sizes"), both
// under the client's hash tag, so a Lua script stores a reply and evicts
// that client's oldest past its quota in one atomic call (Cluster too).
// A client's records thus hold at most its quota's bytes, and all of them
// at most clients × that: size Redis's maxmemory for it, with
// maxmemory-policy noeviction (docs/production.md), so Redis never evicts
// a counter to make room.
package idempotency

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed put.lua
	putLua    string
	putScript = redis.NewScript(putLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// Quota bounds what one client keeps: at most Records records of at most
// Bytes bytes (0: no bound); and what all keep: no reply is kept on a
// Redis node whose used memory is at or past MemoryPercent of its
// maxmemory (0: no bound), so records never take the counters' room.
type Quota struct {
	Records       int
	Bytes         int64
	MemoryPercent int
}

// Redis is a restapi.IdempotencyStore in Redis (single, Sentinel or
// Cluster: every call touches the keys of one client, one slot).
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	quota  Quota
	budget *budget
}

// NewRedis returns the store over rdb; prefix goes before every key
// (CACHE_KEY_PREFIX); quota bounds each client's kept replies.
func NewRedis(rdb redis.UniversalClient, prefix string, quota Quota) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, quota: quota, budget: &budget{percent: quota.MemoryPercent}}
}

// clientPrefix is what every key of client starts with.
func (s *Redis) clientPrefix(client string) string {
	return s.prefix + "throttle:idem:{" + client + "}"
}

// keys returns the record's key, the client's index and sizes.
func (s *Redis) keys(client, key string) []string {
	p := s.clientPrefix(client)
	return []string{p + ":" + key, p + "#index", p + "#sizes"}
}

// Claim stores pending under key unless it holds a value (SET NX), else
// returns the value held (nil when it expired in between).
func (s *Redis) Claim(ctx context.Context, client, key string, pending []byte, ttl time.Duration) (bool, []byte, error) {
	k := s.keys(client, key)[0]
	ok, err := s.rdb.SetNX(ctx, k, pending, ttl).Result()
	if err != nil {
		return false, nil, fmt.Errorf("idempotency: claim: %w", err)
	}
	if ok {
		return true, nil, nil
	}
	held, err := s.rdb.Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("idempotency: read: %w", err)
	}
	return false, held, nil
}

// Put stores value under key for ttl and evicts the client's oldest kept
// replies past its quota. Past the memory budget it stores nothing and
// returns ErrBudget (the pending claim expires by itself).
func (s *Redis) Put(ctx context.Context, client, key string, value []byte, ttl time.Duration) error {
	keys := s.keys(client, key)
	if err := s.budget.check(ctx, s.rdb, keys[0]); err != nil {
		if errors.Is(err, ErrBudget) {
			_ = s.Release(ctx, client, key)
		}
		return err
	}
	err := putScript.Run(ctx, s.rdb, keys, value, ttl.Milliseconds(), key,
		s.clientPrefix(client)+":", s.quota.Records, s.quota.Bytes).Err()
	if err != nil {
		return fmt.Errorf("idempotency: store: %w", err)
	}
	return nil
}

// Release deletes key.
func (s *Redis) Release(ctx context.Context, client, key string) error {
	if err := releaseScript.Run(ctx, s.rdb, s.keys(client, key), key).Err(); err != nil {
		return fmt.Errorf("idempotency: release: %w", err)
	}
	return nil
}
