package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/telemetry"
)

// backendTypeSettings are the reference service's choice of counter
// backend, of which Throttle has the one: Redis with REDIS_URL, else memory.
var backendTypeSettings = []setting{
	{env: "BACKEND_TYPE", flag: "backend-type", def: "redis", ref: upstreamDefault("redis"),
		usage: "the reference's counter backend: redis (counters in Redis with REDIS_URL, else in memory); memcache is " +
			"refused, Throttle has no memcached backend",
		set: func(c *config, v string) error { return parseBackendType(v) }},
}

// parseBackendType checks the reference's BACKEND_TYPE: redis, what
// Throttle does (Redis with REDIS_URL, else memory), and nothing else.
func parseBackendType(v string) error {
	switch strings.ToLower(v) {
	case "redis":
		return nil
	case "memcache":
		return errors.New("memcache: Throttle has no memcached backend; keep counters in Redis (REDIS_URL, the reference's REDIS_* settings) or, on a single replica, in memory (no REDIS_URL)")
	}
	return fmt.Errorf("%q is not redis (the one backend of the reference Throttle has; memcache is not)", v)
}

// openCounters builds the counter store: memory without REDIS_URL, else
// Redis behind the failure policy; with REDIS_PERSECOND, the limits of a
// one-second window in a second Redis behind a policy of its own; with
// GLOBAL_REDIS_URL, the limits of scope global in the Redis every region
// shares, behind a policy of its own too.
func (a *app) openCounters(ctx context.Context) error {
	cfg := a.cfg
	if cfg.Redis.URL == "" {
		mem := algorithms.NewMemoryStore(algorithms.MemoryOptions{})
		a.goBG("memory sweep", mem.Run)
		a.limiter, a.backend = mem, "memory"
		return a.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "throttle_reservations_held_hits",
			Help: "Hits held by unexpired, unsettled holds (reservations): in Redis, over every master that answered (and every Redis of the process: REDIS_URL, REDIS_PERSECOND, GLOBAL_REDIS_URL), as this replica's sweepers last read them; in memory, now.",
		}, func() float64 { return float64(mem.HeldHits()) }))
	}
	// go-redis has one process-wide logger; serve is the process.
	redis.SetLogger(&redisLog{log: a.log, secrets: cfg.redisSecrets()})
	local := algorithms.NewMemoryStore(algorithms.MemoryOptions{})
	a.goBG("local sweep", local.Run)
	var sides redisstore.Sides
	main, mainStore, err := a.openGuarded(ctx, cfg.Redis, "REDIS_", "redis", local)
	if err != nil {
		return err
	}
	a.limiter, a.backend, a.ready, sides.Main = main, "redis", mainStore.Ready, main
	a.ledger = mainStore.Ledger() // every replica caps reservations on one count
	if cfg.RedisPerSecond {
		if sides.PerSecond, _, err = a.openGuarded(ctx, cfg.PerSecond, "REDIS_PERSECOND_", "redis_per_second", local); err != nil {
			return err
		}
	}
	if cfg.GlobalScope() {
		if sides.Global, _, err = a.openGuarded(ctx, cfg.Global, "GLOBAL_REDIS_", "redis_global", local); err != nil {
			return err
		}
	}
	if sides.PerSecond == nil && sides.Global == nil {
		return nil
	}
	split, err := redisstore.NewSplit(sides)
	if err != nil {
		return err
	}
	a.limiter, a.ready = split, split.Ready
	return nil
}

// openGuarded connects to the Redis rc describes (its settings named by
// prefix) and returns its counter store behind a Guard of its own, whose
// metrics name it backend; local is FAILURE_MODE=local's fallback.
func (a *app) openGuarded(ctx context.Context, rc redisConfig, prefix, backend string, local *algorithms.MemoryStore) (*redisstore.Guard, *redisstore.Store, error) {
	cfg := a.cfg
	rdb, err := newRedis(rc, prefix, a.redisTLS)
	if err != nil {
		return nil, nil, err
	}
	secrets := rc.secrets()
	// Concurrent checks share Redis calls: under load one round trip
	// decides many requests. Two workers per master, one call out at a
	// time unless it is slow (the second overtakes a call out for 1 ms): at
	// 64 Envoy calls in flight a third fewer calls than two always out, and
	// 1.1 µs less Redis CPU a decision (measured at e03dc16).
	counters := redisstore.New(rdb, redisstore.Options{Coalesce: 2, MaxBatch: 128, KeyPrefix: cfg.CacheKeyPrefix,
		ApproximateInterval: cfg.ApproximateInterval, ExpirationJitter: cfg.ExpirationJitter, Global: prefix == "GLOBAL_REDIS_",
		Tracer: telemetry.Tracer(a.tracer, "github.com/throttle-rl/throttle/algorithms")})
	if err := counters.RegisterMetrics(a.reg); err != nil {
		return nil, nil, err
	}
	a.onClose(func() { // the servers have stopped: no decision is on its way
		drainCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		if err := counters.Drain(drainCtx); err != nil {
			a.log.Warn("approximate limits: hits not sent to Redis at shutdown", "redis", prefix+"URL", "err", scrub(err, secrets))
		}
		cancel()
		counters.Close()
		rdb.Close()
	})
	pingCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if err := counters.Ping(pingCtx); err != nil {
		a.log.Warn("Redis does not answer yet; FAILURE_MODE decides until it does", "redis", prefix+"URL", "err", scrub(err, secrets), "failure_mode", string(cfg.FailureMode))
	}
	cancel()
	g, err := redisstore.NewGuard(counters, redisstore.GuardOptions{
		Mode: cfg.FailureMode, Backend: backend, Timeout: cfg.BackendTimeout, DefaultTimeout: cfg.RESTTimeout, Local: local, Registerer: a.reg,
	})
	if err != nil {
		return nil, nil, err
	}
	a.goBG(backend+" circuit probe", g.Run)
	return g, counters, nil
}

// redisSecrets are the passwords of every Redis Throttle reaches, for
// scrubbing messages that may quote them.
func (c *config) redisSecrets() []string {
	out := c.Redis.secrets()
	if c.RedisPerSecond {
		out = append(out, c.PerSecond.secrets()...)
	}
	out = append(out, c.Global.secrets()...)
	return out
}
