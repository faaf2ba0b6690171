package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// redisConfig is one Redis deployment as the reference service's settings
// give it: REDIS_* for the counters' Redis, REDIS_PERSECOND_* for the
// per-second one (parseRedisTarget reads it).
type redisConfig struct {
	// URL is a redis:// or rediss:// URL, or in the reference's forms
	// host:port, a unix socket's path, mymaster,host:port… (Sentinel) or
	// host:port,… (Cluster). Empty: none.
	URL string
	// SocketType is tcp or unix (a single Redis); empty: from URL.
	SocketType string
	// Type is single, sentinel or cluster; empty: from URL.
	Type string
	// Auth is password or user:password, SentinelAuth the Sentinels'.
	// Secrets: never logged or shown.
	Auth, SentinelAuth string
	// TLS turns TLS on for a URL in the reference's forms.
	TLS bool
	// PoolSize and Timeout (dial, read, write), when > 0, replace
	// Throttle's defaults (setDefaults in redis.go).
	PoolSize int
	Timeout  time.Duration
}

// secrets are rc's passwords, for scrubbing messages that may quote them.
func (rc redisConfig) secrets() []string {
	out := urlSecrets(rc.URL)
	for _, a := range []string{rc.Auth, rc.SentinelAuth} {
		if a != "" {
			_, p := splitAuth(a)
			out = append(out, a, p)
		}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// redisSettings are the reference service's Redis settings (names, value
// syntax, case-insensitivity as there; Throttle's own defaults where the
// reference's would contradict them): the counters' Redis, the per-second
// Redis beside it, and how the Envoy path counts in them.
var redisSettings = slices.Concat(
	redisConnection("REDIS_", "redis-", "the counters' Redis (with REDIS_URL)", func(c *config) *redisConfig { return &c.Redis }, true),
	redisConnection("REDIS_PERSECOND_", "redis-persecond-", "the per-second Redis (with REDIS_PERSECOND=true)", func(c *config) *redisConfig { return &c.PerSecond }, true),
	redisConnection("GLOBAL_REDIS_", "global-redis-", "the global Redis (with GLOBAL_REDIS_URL)", func(c *config) *redisConfig { return &c.Global }, false),
	[]setting{
		{env: "REDIS_URL", flag: "redis-url", ref: upstreamDefault("/var/run/nutcracker/ratelimit.sock"),
			usage: "counters in Redis: a redis:// or rediss:// URL (?master_name=M for Sentinel, ?cluster=true&addr=host:port… " +
				"for Cluster), or as the reference service gives it: host:port, a unix socket's path, mymaster,host:port… " +
				"with REDIS_TYPE=sentinel, host:port,… with REDIS_TYPE=cluster; empty = in memory",
			set: func(c *config, v string) error { c.Redis.URL = v; return nil }},
		{env: "REDIS_PERSECOND", flag: "redis-persecond", def: "false", ref: upstreamDefault("false"),
			usage: "keep the counters of limits whose window is one second (unit: second) in a Redis of their own, " +
				"REDIS_PERSECOND_URL, as the reference service does: a request with both kinds counts in both, all or nothing; " +
				"a dead per-second Redis fails only per-second decisions, by FAILURE_MODE",
			set: func(c *config, v string) (err error) { c.RedisPerSecond, err = parseBool(v); return }},
		{env: "REDIS_PERSECOND_URL", flag: "redis-persecond-url", ref: upstreamDefault("/var/run/nutcracker/ratelimitpersecond.sock"),
			usage: "with REDIS_PERSECOND=true: the per-second Redis, in any form REDIS_URL takes",
			set:   func(c *config, v string) error { c.PerSecond.URL = v; return nil }},
		{env: "GLOBAL_REDIS_URL", flag: "global-redis-url",
			usage: "with REDIS_URL: the Redis every region shares, in any form REDIS_URL takes, where limits of scope: global are " +
				"counted; each replica of each region decides them from memory within leases of the global budget, sized for " +
				"its round trip to this Redis (docs/global-limits.md); every other limit stays on REDIS_URL. Empty: scope: " +
				"global is refused",
			set: func(c *config, v string) error { c.Global.URL = v; return nil }},
		{env: "REGION", flag: "region",
			usage: "the name of this deployment's region (letters, digits, '-', '_', '.'; at most 63), the label region of the " +
				"global limits' metrics; empty = none",
			set: func(c *config, v string) (err error) { c.Region, err = parseRegion(v); return }},
		{env: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", flag: "redis-health-check-active-connection", def: "false", ref: upstreamDefault("false"),
			usage: "the reference's /healthcheck fails while no connection to Redis is up",
			set:   func(c *config, v string) (err error) { c.RedisHealthCheck, err = parseBool(v); return }},
		{env: "EXPIRATION_JITTER_MAX_SECONDS", flag: "expiration-jitter-max-seconds", def: "0", ref: upstreamDefault("300"),
			usage: "with REDIS_URL: add a random 0 to N seconds to the TTL of each window counter the Envoy path makes, so one " +
				"window's counters do not all expire at once (the reference's default is 300, which keeps a one-second counter " +
				"150 times as long on average)",
			set: func(c *config, v string) (err error) { c.ExpirationJitter, err = parseJitter(v); return }},
		{env: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", flag: "stop-cache-key-increment-when-overlimit", def: "false", ref: upstreamDefault("false"),
			usage: "true: a gRPC rate-limit request over a limit counts on none of its descriptors, which is Throttle's way " +
				"already (it contradicts COUNT_REJECTED_HITS=true); false, the reference's default: COUNT_REJECTED_HITS decides",
			set: func(c *config, v string) (err error) { c.StopIncrementOverLimit, err = parseBool(v); return }},
		{env: "NEAR_LIMIT_RATIO", flag: "near-limit-ratio", def: "0.8", ref: upstreamDefault("0.8"),
			usage: "the share of a limit (0 to 1, above 0) past which an admitted hit counts as near the limit in the Envoy path's metrics",
			set:   func(c *config, v string) (err error) { c.NearLimitRatio, err = parseFloat(v); return }},
	},
)

// redisConnection is the rows of one Redis deployment's settings other than
// its URL: prefix REDIS_, REDIS_PERSECOND_ or GLOBAL_REDIS_, flags after
// flag, rc its redisConfig; reference says the reference service has these
// settings (GLOBAL_REDIS_* are Throttle's own).
func redisConnection(prefix, flag, which string, rc func(*config) *redisConfig, reference bool) []setting {
	ref := func(def string) upstream {
		if !reference {
			return upstream{}
		}
		return upstreamDefault(def)
	}
	rows := []setting{
		{env: prefix + "SOCKET_TYPE", flag: flag + "socket-type", ref: ref("unix"),
			usage: "tcp or unix: how " + which + " is reached when its URL is host:port or a path; empty = unix for a path, " +
				"else tcp (the reference's default is unix); Sentinel and Cluster use tcp",
			set: func(c *config, v string) (err error) { rc(c).SocketType, err = parseSocketType(v); return }},
		{env: prefix + "TYPE", flag: flag + "type", ref: ref("SINGLE"),
			usage: "single, sentinel or cluster (any case): what kind of Redis " + which + " is, for a URL in the " +
				"reference's forms; empty = single, or what a redis:// URL says",
			set: func(c *config, v string) (err error) { rc(c).Type, err = parseRedisType(v); return }},
		{env: prefix + "AUTH", flag: flag + "auth", ref: ref(""),
			usage: "password, or user:password (an ACL user), of " + which + "; never logged",
			set:   func(c *config, v string) error { rc(c).Auth = v; return nil }},
		{env: prefix + "SENTINEL_AUTH", flag: flag + "sentinel-auth", ref: ref(""),
			usage: "password, or user:password, of the Sentinels of " + which + " (" + prefix + "AUTH is the master's); " +
				"ignored without Sentinel, as in the reference; never logged",
			set: func(c *config, v string) error { rc(c).SentinelAuth = v; return nil }},
		{env: prefix + "TLS", flag: flag + "tls", def: "false", ref: ref("false"),
			usage: "reach " + which + " over TLS (REDIS_TLS_CACERT and the other REDIS_TLS_* apply), as a rediss:// URL does",
			set:   func(c *config, v string) (err error) { rc(c).TLS, err = parseBool(v); return }},
		{env: prefix + "POOL_SIZE", flag: flag + "pool-size", ref: ref("10"),
			usage: "most connections to each Redis node of " + which + "; empty = " + strconv.Itoa(defaultPoolSize) +
				" (the reference's default is 10: go-redis waits a second to dial again after that many failed dials, " +
				"which keeps the circuit open that long after Redis is back)",
			set: func(c *config, v string) (err error) { rc(c).PoolSize, err = parsePositive(v); return }},
		{env: prefix + "TIMEOUT", flag: flag + "timeout", ref: ref("10s"),
			usage: "dial, read and write timeout of the connections to " + which + "; empty = " + defaultRedisTimeout.String() +
				" (the reference's default is 10s); every call is bounded by its own budget anyway (BACKEND_TIMEOUT)",
			set: func(c *config, v string) (err error) { rc(c).Timeout, err = parseNonNegativeDuration(v); return }},
	}
	if reference {
		rows = append(rows, setting{env: prefix + "PIPELINE_WINDOW", flag: flag + "pipeline-window", ref: upstreamInert("0", noPipelineWait),
			usage: "accepted without effect (named in the log at start): " + noPipelineWait,
			set:   func(c *config, v string) error { _, err := parseNonNegativeDuration(v); return err }})
	}
	return rows
}

// parseSocketType reads REDIS_SOCKET_TYPE: tcp or unix, any case.
func parseSocketType(v string) (string, error) {
	switch s := strings.ToLower(v); s {
	case "", "tcp", "unix":
		return s, nil
	}
	return "", fmt.Errorf("%q is not tcp or unix", v)
}

// parseRedisType reads REDIS_TYPE: single, sentinel or cluster, any case.
func parseRedisType(v string) (string, error) {
	switch s := strings.ToLower(v); s {
	case "", redisSingle, redisSentinel, redisCluster:
		return s, nil
	}
	return "", fmt.Errorf("%q is not single, sentinel or cluster", v)
}

// parsePositive reads a number of at least 1; empty is 0 (not given).
func parsePositive(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a number of at least 1", v)
	}
	return n, nil
}

// parseNonNegativeDuration reads a duration of 0 or more; empty is 0.
func parseNonNegativeDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 10s or 500us", v)
	}
	return d, nil
}

// parseFloat reads a number such as 0.8.
func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return f, nil
}

// maxJitter bounds EXPIRATION_JITTER_MAX_SECONDS: a day.
const maxJitter = 24 * time.Hour

// parseJitter reads EXPIRATION_JITTER_MAX_SECONDS: whole seconds, 0 to a
// day.
func parseJitter(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > int64(maxJitter/time.Second) {
		return 0, fmt.Errorf("%q is not a number of seconds from 0 to %d", v, int64(maxJitter/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// validateRedis checks the Redis settings together: each deployment's
// settings make one (parseRedisTarget), the per-second Redis comes with
// the main one, and the Envoy path's counting settings agree.
func (c *config) validateRedis() []error {
	var errs []error
	if c.Redis.URL != "" {
		if _, err := parseRedisTarget(c.Redis, "REDIS_"); err != nil {
			errs = append(errs, scrub(err, c.Redis.secrets()))
		}
	}
	if c.RedisPerSecond {
		switch {
		case c.Redis.URL == "":
			errs = append(errs, errors.New("REDIS_PERSECOND: true needs REDIS_URL (the per-second Redis is beside the counters' Redis; without REDIS_URL counters are in memory)"))
		case c.PerSecond.URL == "":
			errs = append(errs, errors.New("REDIS_PERSECOND: true needs REDIS_PERSECOND_URL, the per-second Redis"))
		default:
			if _, err := parseRedisTarget(c.PerSecond, "REDIS_PERSECOND_"); err != nil {
				errs = append(errs, scrub(err, c.PerSecond.secrets()))
			}
		}
	}
	if c.Global.URL != "" {
		if c.Redis.URL == "" {
			errs = append(errs, errors.New("GLOBAL_REDIS_URL needs REDIS_URL: global limits are decided from leases beside a regional Redis; without REDIS_URL counters are in memory, on one node"))
		} else if _, err := parseRedisTarget(c.Global, "GLOBAL_REDIS_"); err != nil {
			errs = append(errs, scrub(err, c.Global.secrets()))
		}
	}
	if c.StopIncrementOverLimit && c.CountRejectedHits {
		errs = append(errs, errors.New("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and COUNT_REJECTED_HITS=true contradict each other: the first counts nothing of a request over a limit, the second counts every hit; give one"))
	}
	if !(c.NearLimitRatio > 0 && c.NearLimitRatio <= 1) {
		errs = append(errs, fmt.Errorf("NEAR_LIMIT_RATIO: %v is not above 0 and at most 1", c.NearLimitRatio))
	}
	return errs
}

// redisTLSOn reports whether Throttle reaches a Redis over TLS: a rediss://
// URL or REDIS_TLS=true, of the counters' Redis or of the per-second one.
func (c *config) redisTLSOn() bool {
	on := func(rc redisConfig) bool { return strings.HasPrefix(rc.URL, "rediss://") || (rc.TLS && rc.URL != "") }
	return on(c.Redis) || (c.RedisPerSecond && on(c.PerSecond)) || on(c.Global)
}

// GlobalScope reports whether limits of scope global can be kept: a
// global Redis is set (GLOBAL_REDIS_URL).
func (c *config) GlobalScope() bool { return c.Global.URL != "" }

// parseRegion checks a REGION: empty, or a short name fit for a metric
// label.
func parseRegion(v string) (string, error) {
	if len(v) > 63 {
		return "", fmt.Errorf("%q is longer than 63 characters", v)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "", fmt.Errorf("%q holds %q: a region is letters, digits, '-', '_' and '.'", v, r)
		}
	}
	return v, nil
}
