package main

import "github.com/throttle-rl/throttle/quotasvc"

// newQuota builds the rate-limit quota service (RLQS) over the same domains
// as ShouldRateLimit. With REDIS_URL it shares demands through a Redis
// client of its own, so its reassignments never queue behind the rate-limit
// path's calls (over TLS as that one, a.redisTLS).
func (a *app) newQuota() (*quotasvc.Server, error) {
	cfg := a.cfg
	opts := quotasvc.Options{
		Descriptors: a.current, Rules: a.cache, Interval: cfg.RLQSInterval, FailureMode: cfg.FailureMode,
		KeyPrefix: cfg.CacheKeyPrefix, ShadowMode: cfg.ShadowMode, Log: a.log, Registerer: a.reg,
	}
	if cfg.Redis.URL != "" {
		rdb, err := newRedis(cfg.Redis, "REDIS_", a.redisTLS)
		if err != nil {
			return nil, err
		}
		a.onClose(func() { rdb.Close() })
		opts.Redis = rdb
	}
	q, err := quotasvc.New(opts)
	if err != nil {
		return nil, err
	}
	a.goBG("rlqs", q.Run)
	return q, nil
}
