package main

import (
	"context"
	"crypto/tls"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/quotasvc"
	"github.com/throttle-rl/throttle/store"
)

// newQuota builds the rate-limit quota service (RLQS) over the same domains
// as ShouldRateLimit. With REDIS_URL it shares demands through a Redis
// client of its own, so its reassignments never queue behind the rate-limit
// path's calls (over TLS as that one, redisTLS).
func newQuota(cfg *config, redisTLS func(string) *tls.Config, current func() *descriptors.Config, rules *store.Cache, log *slog.Logger, reg prometheus.Registerer, goBG func(string, func(context.Context) error)) (*quotasvc.Server, error) {
	opts := quotasvc.Options{
		Descriptors: current, Rules: rules, Interval: cfg.RLQSInterval, FailureMode: cfg.FailureMode,
		KeyPrefix: cfg.CacheKeyPrefix, ShadowMode: cfg.ShadowMode, Log: log, Registerer: reg,
	}
	if cfg.Redis.URL != "" {
		rdb, err := newRedis(cfg.Redis, "REDIS_", redisTLS)
		if err != nil {
			return nil, err
		}
		goBG("rlqs redis close", func(ctx context.Context) error {
			<-ctx.Done()
			return rdb.Close()
		})
		opts.Redis = rdb
	}
	q, err := quotasvc.New(opts)
	if err != nil {
		return nil, err
	}
	goBG("rlqs", q.Run)
	return q, nil
}
