// Package idempotency keeps the replies of idempotent REST checks
// (restapi.IdempotencyStore) in Redis, so every replica behind one Redis
// answers a retried Idempotency-Key alike. Each record is one key,
// "<prefix>throttle:idem:{<key>}", with a time to live; a claim is SET NX.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a restapi.IdempotencyStore in Redis (single, Sentinel or
// Cluster: every call touches one key).
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedis returns the store over rdb; prefix goes before every key
// (CACHE_KEY_PREFIX).
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix}
}

func (s *Redis) key(k string) string { return s.prefix + "throttle:idem:{" + k + "}" }

// Claim stores pending under key unless it holds a value (SET NX), else
// returns the value held (nil when it expired in between).
func (s *Redis) Claim(ctx context.Context, key string, pending []byte, ttl time.Duration) (bool, []byte, error) {
	ok, err := s.rdb.SetNX(ctx, s.key(key), pending, ttl).Result()
	if err != nil {
		return false, nil, fmt.Errorf("idempotency: claim: %w", err)
	}
	if ok {
		return true, nil, nil
	}
	held, err := s.rdb.Get(ctx, s.key(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("idempotency: read: %w", err)
	}
	return false, held, nil
}

// Put stores value under key for ttl.
func (s *Redis) Put(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, s.key(key), value, ttl).Err(); err != nil {
		return fmt.Errorf("idempotency: store: %w", err)
	}
	return nil
}

// Release deletes key.
func (s *Redis) Release(ctx context.Context, key string) error {
	if err := s.rdb.Del(ctx, s.key(key)).Err(); err != nil {
		return fmt.Errorf("idempotency: release: %w", err)
	}
	return nil
}
