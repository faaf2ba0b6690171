package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
)

// config is every setting of `throttle serve`. Each comes from a flag, else
// from its environment variable, else from its default: serveSettings has a
// row for each, which parses it into its field here.
type config struct {
	Port        int
	GRPCPort    int
	BindAddress string
	Listen      listenConfig // HOST, GRPC_HOST, GRPC_UDS, DEBUG_* (listeners.go)
	Doors       doorsConfig  // the pages PORT serves without a key (rest.go)
	LogFormat   string       // json or text (logging.go)
	// HealthyWithConfig makes /healthcheck wait for a descriptor
	// configuration (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthyWithConfig bool
	LimitHeaders      limitHeadersConfig // LIMIT_RESPONSE_HEADERS_ENABLED and its names (headers.go)
	// Redis is the counters' Redis (REDIS_URL and the reference's REDIS_*
	// settings); PerSecond, with RedisPerSecond, the Redis of the limits
	// whose window is one second (REDIS_PERSECOND_*).
	Redis          redisConfig
	RedisPerSecond bool
	PerSecond      redisConfig
	// Global is the Redis every region shares, where limits of scope
	// global are counted (GLOBAL_REDIS_*); Region names this deployment's
	// region in their metrics (REGION).
	Global redisConfig
	Region string
	// RedisHealthCheck is REDIS_HEALTH_CHECK_ACTIVE_CONNECTION.
	RedisHealthCheck bool
	// ExpirationJitter is EXPIRATION_JITTER_MAX_SECONDS.
	ExpirationJitter time.Duration
	// StopIncrementOverLimit is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	StopIncrementOverLimit bool
	// NearLimitRatio is NEAR_LIMIT_RATIO.
	NearLimitRatio  float64
	DatabaseURL     string
	DescriptorsDir  string
	Runtime         runtimeConfig // the reference's config folder (descriptors.go)
	MergeDomains    bool
	ReloadInterval  time.Duration
	FailureMode     algorithms.FailureMode
	BackendTimeout  time.Duration // 0: derived from each call's deadline
	RESTTimeout     time.Duration
	LocalCacheBytes int
	// GCPercent is the Go collector's target for serve: defaultGCPercent
	// unless the environment sets GOGC (then 0: Go's own reading stands).
	GCPercent         int
	DebugAddress      string
	TrustedProxies    []netip.Prefix
	LogLevel          slog.Level
	ResponseHeaders   bool
	HeaderSets        ratelimitheader.Sets
	ShadowMode        bool
	DynamicMetadata   bool
	ForceStart        bool
	MaxValueStatsKeys int
	CacheRefresh      time.Duration
	RegisterLimit     int64
	ShutdownTimeout   time.Duration
	// AdminKey is the operator key of the Envoy counters routes
	// (ADMIN_API_KEY); empty: none. A secret: never logged or shown.
	AdminKey string
	// CacheKeyPrefix goes before every Redis key (CACHE_KEY_PREFIX).
	CacheKeyPrefix string
	// CountRejectedHits keeps the reference service's counting on the
	// Envoy path (COUNT_REJECTED_HITS).
	CountRejectedHits bool
	RLQSInterval      time.Duration
	// ApproximateInterval is APPROXIMATE_SYNC_INTERVAL.
	ApproximateInterval time.Duration
	// MaxReservationTTL is MAX_RESERVATION_TTL.
	MaxReservationTTL time.Duration
	Tracing           tracingConfig
	TLS               tlsConfig
	REST              restAppsConfig  // CORS, list format, idempotency (rest.go)
	XDS               xdsConfig       // CONFIG_TYPE=GRPC_XDS_SOTW (xdssettings.go)
	Stats             statsSinkConfig // the reference service's stats sink, USE_STATSD… (refstatssettings.go)
	Tenancy           tenancyConfig   // the tenants' lanes (tenancy.go)

	// Inert are the settings given that change nothing here (their rows'
	// ref.inert), by name, for the log.
	Inert []string

	// MaxDescriptors and MaxDescriptorEntries cap one gRPC rate-limit
	// request's descriptors and each descriptor's entries, and
	// MaxOverrideWindow a limit override's window (package inputsize).
	MaxDescriptors, MaxDescriptorEntries int
	MaxOverrideWindow                    time.Duration
}

// defaultGCPercent is serve's GOGC. Go's default, 100, collects the small
// live heap of a busy server many times a second; at 400 a loaded replica
// spent 25-35 % less CPU per Envoy call and served 25-85 % more calls
// (measured when it was chosen, 2026-12-02), for a heap up
// to 5× the live data instead of 2×.
// GOGC and GOMEMLIMIT, Go's own variables, still rule when set.
const defaultGCPercent = 400

// parseServe reads the settings from args and getenv: each one given is
// parsed by its row of serveSettings, the others get their defaults
// (setDefaults), and the whole is checked (Validate).
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	given, err := readSettings(args, getenv, stderr)
	if err != nil {
		return nil, err
	}
	c := &config{}
	var errs []error
	for _, s := range serveSettings {
		if v, ok := given[s.env]; ok && s.set != nil {
			if err := s.set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.env, scrubSetting(s.env, v, err)))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.setDefaults(given, getenv); err != nil {
		return nil, err
	}
	c.Inert = inertGiven(c, given)
	if err := c.Stats.readEnv(getenv); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// setDefaults gives every setting not given its default: its row's, parsed
// as a value given would be, and then those that follow from other
// settings (tracing's endpoint and protocol, the GC target unless GOGC is
// set). An error is a row whose default does not parse: a bug.
func (c *config) setDefaults(given map[string]string, getenv func(string) string) error {
	for _, s := range serveSettings {
		if _, ok := given[s.env]; ok || s.set == nil {
			continue
		}
		if err := s.set(c, s.def); err != nil {
			return fmt.Errorf("the default of %s: %w", s.env, err)
		}
	}
	c.Tracing.applyReference(given)
	c.Tracing.setDefaults()
	if getenv("GOGC") == "" {
		c.GCPercent = defaultGCPercent
	}
	return nil
}

// Validate checks the settings together: ranges, and values that must agree.
func (c *config) Validate() error {
	var errs []error
	for name, p := range map[string]int{"PORT": c.Port, "GRPC_PORT": c.GRPCPort} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s: %d is not a port (1-65535)", name, p))
		}
	}
	if c.Port == c.GRPCPort && c.Listen.GRPCUDS == "" {
		errs = append(errs, fmt.Errorf("PORT and GRPC_PORT are both %d", c.Port))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL: empty; use sqlite://PATH or postgres://…"))
	}
	if c.DescriptorsDir != "" && c.runtimeFolder() != "" {
		errs = append(errs, errors.New("DESCRIPTORS_DIR and RUNTIME_ROOT/RUNTIME_SUBDIRECTORY are both set: give the descriptor folder one way, DESCRIPTORS_DIR or the reference service's RUNTIME_* settings"))
	}
	errs = append(append(errs, c.validateRedis()...), c.validateRanges()...)
	if k := c.AdminKey; k != "" && (len(k) < minAdminKeyLen || strings.HasPrefix(k, clientKeyPrefix)) {
		errs = append(errs, fmt.Errorf("ADMIN_API_KEY: must be at least %d characters and not start with %q (a client's API key is never the operator's)", minAdminKeyLen, clientKeyPrefix))
	}
	if err := checkKeyPrefix(c.CacheKeyPrefix); err != nil {
		errs = append(errs, fmt.Errorf("CACHE_KEY_PREFIX: %w", err))
	}
	errs = append(append(errs, c.validateListen()...), c.LimitHeaders.validate()...)
	errs = append(errs, c.TLS.validate(c.redisTLSOn())...)
	errs = append(errs, c.XDS.validate()...)
	errs = append(errs, c.Stats.validate(c)...)
	return errors.Join(errs...)
}

// validateRanges checks the numbers and durations that have a range.
func (c *config) validateRanges() []error {
	var errs []error
	if c.MaxValueStatsKeys < 0 {
		errs = append(errs, fmt.Errorf("STATS_MAX_VALUE_KEYS: %d must be 0 or more", c.MaxValueStatsKeys))
	}
	if c.MaxDescriptors < 1 {
		errs = append(errs, fmt.Errorf("MAX_DESCRIPTORS_PER_REQUEST: %d must be at least 1", c.MaxDescriptors))
	}
	if c.MaxDescriptorEntries < 1 {
		errs = append(errs, fmt.Errorf("MAX_DESCRIPTOR_ENTRIES: %d must be at least 1", c.MaxDescriptorEntries))
	}
	if c.MaxOverrideWindow > algorithms.MaxWindow {
		errs = append(errs, fmt.Errorf("MAX_OVERRIDE_WINDOW: %s is longer than the longest window, %s (366 days)", c.MaxOverrideWindow, algorithms.MaxWindow))
	}
	if c.RegisterLimit < 1 {
		errs = append(errs, fmt.Errorf("REGISTER_LIMIT_PER_HOUR: %d must be at least 1", c.RegisterLimit))
	}
	if c.BackendTimeout > 10*time.Second {
		errs = append(errs, fmt.Errorf("BACKEND_TIMEOUT: %s is longer than any proxy waits; leave it empty to follow each caller's deadline", c.BackendTimeout))
	}
	if c.LocalCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("LOCAL_CACHE_SIZE_IN_BYTES: %d must be 0 (off) or more", c.LocalCacheBytes))
	}
	if c.RESTTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("REST_BACKEND_TIMEOUT: %s is longer than any app waits for a rate-limit check", c.RESTTimeout))
	}
	if c.RLQSInterval < 100*time.Millisecond || c.RLQSInterval > time.Hour {
		errs = append(errs, fmt.Errorf("RLQS_INTERVAL: %s is not within 100ms-1h (Envoy reports at most every 100ms)", c.RLQSInterval))
	}
	if c.ApproximateInterval < 10*time.Millisecond || c.ApproximateInterval > 10*time.Second {
		errs = append(errs, fmt.Errorf("APPROXIMATE_SYNC_INTERVAL: %s is not within 10ms-10s", c.ApproximateInterval))
	}
	if c.MaxReservationTTL < time.Second || c.MaxReservationTTL > algorithms.MaxHoldTTL {
		errs = append(errs, fmt.Errorf("MAX_RESERVATION_TTL: %s is not within 1s-24h", c.MaxReservationTTL))
	}
	return errs
}

// maxValueKeys maps STATS_MAX_VALUE_KEYS (0 = none) to
// ratelimitsvc.Options.MaxValueStatsKeys (0 = default, negative = none).
func maxValueKeys(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// minAdminKeyLen is the shortest ADMIN_API_KEY; clientKeyPrefix starts
// every client's API key, and so no operator key.
const (
	minAdminKeyLen  = 16
	clientKeyPrefix = "thr_"
)

// checkKeyPrefix refuses a CACHE_KEY_PREFIX that would change which keys
// share a Redis Cluster slot (a '{' or '}' would be taken for the hash tag
// of every key) or that is hard to type and see.
func checkKeyPrefix(p string) error {
	if len(p) > 64 {
		return fmt.Errorf("%d bytes, more than 64", len(p))
	}
	for _, r := range p {
		switch {
		case r == '{' || r == '}':
			return fmt.Errorf("%q has a '{' or '}', which Redis Cluster would read as the hash tag of every key", p)
		case r <= ' ' || r == 0x7f:
			return fmt.Errorf("%q has a space or a control character", p)
		}
	}
	return nil
}
