package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// config is every setting of `throttle serve`. Each comes from a flag, else
// from its environment variable, else from its default.
type config struct {
	Port            int
	GRPCPort        int
	BindAddress     string
	RedisURL        string
	DatabaseURL     string
	DescriptorsDir  string
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
	Tracing           tracingConfig
	REST              restAppsConfig // CORS, list format, idempotency (restapps.go)
	failureModeRaw    string
	trustedProxiesRaw string
	logLevelRaw       string
	headerSetsRaw     string

	// MaxDescriptors and MaxDescriptorEntries cap one gRPC rate-limit
	// request's descriptors and each descriptor's entries.
	MaxDescriptors, MaxDescriptorEntries int
}

// defaultGCPercent is serve's GOGC. Go's default, 100, collects the small
// live heap of a busy server many times a second; at 400 a loaded replica
// spent 25-35 % less CPU per Envoy call and served 25-85 % more calls
// (docs/benchmarks.md), for a heap up to 5× the live data instead of 2×.
// GOGC and GOMEMLIMIT, Go's own variables, still rule when set.
const defaultGCPercent = 400

// setting describes one variable for flags and --help.
type setting struct {
	env, flag, def, usage string
}

var serveSettings = []setting{
	{"PORT", "port", "8080", "REST listen port"},
	{"GRPC_PORT", "grpc-port", "8081", "gRPC listen port (Envoy rate-limit service and rate-limit quota service, gRPC health)"},
	{"BIND_ADDRESS", "bind-address", "", "address to listen on; empty = all interfaces"},
	{"REDIS_URL", "redis-url", "", "counters in Redis: redis://, rediss://; ?master_name=M for Sentinel, ?cluster=true (&addr=host:port…) for Cluster; empty = in memory"},
	{"DATABASE_URL", "database-url", "sqlite://throttle.db", "clients, rules, exemptions: postgres://… or sqlite://PATH"},
	{"DESCRIPTORS_DIR", "descriptors-dir", "", "folder of Envoy descriptor YAML files (reloaded on change); empty = none"},
	{"MERGE_DOMAIN_CONFIG", "merge-domain-config", "false", "let several descriptor files describe one domain"},
	{"DESCRIPTORS_RELOAD_INTERVAL", "descriptors-reload-interval", "2s", "how often DESCRIPTORS_DIR is checked for changes"},
	{"FAILURE_MODE", "failure-mode", "open", "when Redis fails: open (admit), closed (reject) or local (this replica's memory counters)"},
	{"BACKEND_TIMEOUT", "backend-timeout", "", "fixed budget of every Redis call, overriding the derived ones; empty = a gRPC call's own deadline (Envoy's grpc-timeout) minus a margin of a fifth (2ms-100ms), REST_BACKEND_TIMEOUT for calls without one"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "local-cache-size-in-bytes", "8388608", "memory for the Envoy path's over-limit cache (with REDIS_URL): a descriptor Redis rejected is rejected locally until Redis said it could pass; 0 = off"},
	{"REST_BACKEND_TIMEOUT", "rest-backend-timeout", "500ms", "budget of a Redis call for a check that brings no deadline (REST /check, gRPC without grpc-timeout); past it: 503/UNAVAILABLE if Redis answers others (overload), else FAILURE_MODE"},
	{"TRUSTED_PROXIES", "trusted-proxies", "", "comma-separated CIDRs whose X-Forwarded-For/X-Real-IP are believed"},
	{"LOG_LEVEL", "log-level", "info", "debug, info, warn or error"},
	{"DEBUG_ADDRESS", "debug-address", "", "host:port serving Go's profiler at /debug/pprof/ (bind it to loopback, e.g. 127.0.0.1:6070); empty = off"},
	{"RATE_LIMIT_HEADERS", "rate-limit-headers", "both", "rate-limit headers on REST /check, /check/ip and /register replies, and on gRPC responses with RATE_LIMIT_RESPONSE_HEADERS: x (X-RateLimit-* only), ietf (only RateLimit-Policy and RateLimit of draft-ietf-httpapi-ratelimit-headers-11) or both; Retry-After comes with every rejection whatever this says"},
	{"RATE_LIMIT_RESPONSE_HEADERS", "rate-limit-response-headers", "false", "add the RATE_LIMIT_HEADERS headers (and Retry-After when over the limit) to gRPC rate-limit responses, for Envoy to add to its reply"},
	{"SHADOW_MODE", "shadow-mode", "false", "answer every gRPC rate-limit request OK: limits are still decided, counted and reported per descriptor, only the overall OVER_LIMIT becomes OK"},
	{"RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata", "false", "set dynamic_metadata on gRPC rate-limit responses: the request's domain, descriptors and hits_addend, and the metadata of the descriptors within their limits"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "force-start-without-initial-config", "false", "start even when DESCRIPTORS_DIR is missing or does not load, and load it when it appears; until then gRPC requests for domains no client owns fail UNAVAILABLE"},
	{"STATS_MAX_VALUE_KEYS", "stats-max-value-keys", "1000", "most distinct metric keys holding request values (detailed_metric, value_to_metric, limit overrides); further values count under the descriptor's configured key; 0 = none"},
	{"MAX_DESCRIPTORS_PER_REQUEST", "max-descriptors-per-request", strconv.Itoa(ratelimitsvc.DefaultMaxDescriptors), "most descriptors in one gRPC rate-limit request; a request with more is refused INVALID_ARGUMENT, nothing counted (Envoy sends a handful)"},
	{"MAX_DESCRIPTOR_ENTRIES", "max-descriptor-entries", strconv.Itoa(ratelimitsvc.DefaultMaxDescriptorEntries), "most entries in one descriptor of a gRPC rate-limit request; a request with more is refused INVALID_ARGUMENT, nothing counted"},
	{"CACHE_REFRESH_INTERVAL", "cache-refresh-interval", "2s", "how often rules, exemptions and keys changed on other replicas are picked up"},
	{"REGISTER_LIMIT_PER_HOUR", "register-limit-per-hour", "10", "POST /register calls allowed per client IP per hour"},
	{"SHUTDOWN_TIMEOUT", "shutdown-timeout", "15s", "how long SIGTERM waits for in-flight requests"},
	{"ADMIN_API_KEY", "admin-api-key", "", "operator key (at least 16 characters, not a client's thr_ key) for POST /descriptors/{domain}/counters and …/reset: reads and resets the Envoy counters of any domain, the YAML's included; no other route takes it; empty = no operator access"},
	{"CACHE_KEY_PREFIX", "cache-key-prefix", "", "with REDIS_URL: put before every Redis key, so several deployments share one Redis or Redis Cluster (the reference service's setting); no '{', '}', spaces or control characters, at most 64 bytes"},
	{"COUNT_REJECTED_HITS", "count-rejected-hits", "false", "count every hit of every descriptor of a gRPC rate-limit request, admitted or not, as the reference service does; by default a rejected request consumes nothing, from any of its descriptors"},
	{"CORS_ALLOWED_ORIGIN", "cors-allowed-origin", "", "comma-separated origins (https://app.example.com, or *) whose browser pages may call the REST API: preflights answered, rate-limit headers exposed; empty = no cross-origin access"},
	{"LIST_RESPONSE_FORMAT", "list-response-format", "array", "GET /rules/list and /exemptions/list answer bare arrays (array), or {\"rules\": [...]} and {\"exemptions\": [...]} as the original service did (object)"},
	{"IDEMPOTENCY_TTL", "idempotency-ttl", "24h", "how long a REST check's first reply is kept for its Idempotency-Key (in Redis with REDIS_URL, else in memory)"},
	{"RLQS_INTERVAL", "rlqs-interval", "1s", "how often the rate-limit quota service (RLQS, on GRPC_PORT) reassigns every Envoy's share of each limit (100ms-1h); set the Envoy filter's reporting_interval to a third of it"},
	// OpenTelemetry tracing: the standard variables, named by its specification.
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "otel-exporter-otlp-endpoint", "", "OpenTelemetry tracing: base URL of the OTLP receiver, such as http://collector:4318 (http/protobuf; /v1/traces is appended) or http://collector:4317 (grpc); https:// uses TLS with the system's roots; empty = tracing off (no spans, no cost)"},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel-exporter-otlp-traces-endpoint", "", "URL for traces, used as it is (http/protobuf: with its path, such as http://collector:4318/v1/traces); wins over OTEL_EXPORTER_OTLP_ENDPOINT, and alone turns tracing on too"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "otel-exporter-otlp-protocol", protocolHTTP, "OTLP transport: grpc or http/protobuf"},
	{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "otel-exporter-otlp-traces-protocol", "", "OTLP transport for traces; empty = OTEL_EXPORTER_OTLP_PROTOCOL"},
	{"OTEL_EXPORTER_OTLP_HEADERS", "otel-exporter-otlp-headers", "", "headers of every OTLP request (such as the tracing backend's API key): key=value pairs, comma-separated, values percent-encoded; never logged"},
	{"OTEL_SERVICE_NAME", "otel-service-name", "throttle", "service.name of the spans (wins over one in OTEL_RESOURCE_ATTRIBUTES)"},
	{"OTEL_RESOURCE_ATTRIBUTES", "otel-resource-attributes", "", "more resource attributes of the spans: key=value pairs, comma-separated, values percent-encoded (such as deployment.environment.name=prod)"},
	{"OTEL_TRACES_SAMPLER", "otel-traces-sampler", "parentbased_always_on", "which traces are recorded: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio (parentbased_*: follow the caller's sampled flag when it sends a traceparent)"},
	{"OTEL_TRACES_SAMPLER_ARG", "otel-traces-sampler-arg", "", "the ratio of traces the traceidratio samplers record, 0 to 1; empty = 1"},
}

// parseServe reads the settings from args and getenv. It is long because it
// is a list: one line per setting, each read with the helper of its type
// (durVar, intVar, …) into the config field it fills.
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("throttle serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vals := map[string]*string{}
	for _, s := range serveSettings {
		def := s.def
		if v := getenv(s.env); v != "" {
			def = v
		}
		vals[s.env] = fs.String(s.flag, def, "")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: throttle serve [flags]\n\nServes the REST API on PORT, and Envoy's rate-limit and rate-limit quota services on GRPC_PORT.\nWith no settings: counters in memory, data in sqlite://throttle.db.\n\nEvery flag has an environment variable; a flag wins over its variable.\n\n")
		for _, s := range serveSettings {
			def := s.def
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(stderr, "  --%s (env %s, default %s)\n      %s\n", s.flag, s.env, def, s.usage)
		}
		fmt.Fprintf(stderr, "\nGo's own GOGC (serve's default %d) and GOMEMLIMIT (a soft memory limit, e.g. the container's) are honoured.\n", defaultGCPercent)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	get := func(env string) string { return strings.TrimSpace(*vals[env]) }
	gcPercent := defaultGCPercent
	if getenv("GOGC") != "" {
		gcPercent = 0
	}
	c := &config{
		GCPercent:         gcPercent,
		BindAddress:       get("BIND_ADDRESS"),
		DebugAddress:      get("DEBUG_ADDRESS"),
		RedisURL:          get("REDIS_URL"),
		DatabaseURL:       get("DATABASE_URL"),
		DescriptorsDir:    get("DESCRIPTORS_DIR"),
		failureModeRaw:    get("FAILURE_MODE"),
		trustedProxiesRaw: get("TRUSTED_PROXIES"),
		logLevelRaw:       get("LOG_LEVEL"),
		headerSetsRaw:     get("RATE_LIMIT_HEADERS"),
		AdminKey:          get("ADMIN_API_KEY"),
		CacheKeyPrefix:    get("CACHE_KEY_PREFIX"),
		Tracing: tracingConfig{
			endpointRaw: get("OTEL_EXPORTER_OTLP_ENDPOINT"), tracesEndpointRaw: get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
			protocolRaw: get("OTEL_EXPORTER_OTLP_PROTOCOL"), tracesProtocolRaw: get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
			headersRaw: get("OTEL_EXPORTER_OTLP_HEADERS"), resourceRaw: get("OTEL_RESOURCE_ATTRIBUTES"),
			ServiceName: get("OTEL_SERVICE_NAME"), Sampler: get("OTEL_TRACES_SAMPLER"), samplerArgRaw: get("OTEL_TRACES_SAMPLER_ARG"),
		},
	}
	var errs []error
	intVar := func(env string, dst *int) {
		n, err := strconv.Atoi(get(env))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a number", env, get(env)))
		}
		*dst = n
	}
	durVar := func(env string, dst *time.Duration) {
		d, err := time.ParseDuration(get(env))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration such as 2s or 15ms", env, get(env)))
		}
		*dst = d
	}
	boolVar := func(env string, dst *bool) {
		b, err := strconv.ParseBool(get(env))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not true or false", env, get(env)))
		}
		*dst = b
	}
	intVar("PORT", &c.Port)
	intVar("GRPC_PORT", &c.GRPCPort)
	intVar("LOCAL_CACHE_SIZE_IN_BYTES", &c.LocalCacheBytes)
	var reg int
	intVar("REGISTER_LIMIT_PER_HOUR", &reg)
	c.RegisterLimit = int64(reg)
	intVar("STATS_MAX_VALUE_KEYS", &c.MaxValueStatsKeys)
	intVar("MAX_DESCRIPTORS_PER_REQUEST", &c.MaxDescriptors)
	intVar("MAX_DESCRIPTOR_ENTRIES", &c.MaxDescriptorEntries)
	boolVar("MERGE_DOMAIN_CONFIG", &c.MergeDomains)
	boolVar("RATE_LIMIT_RESPONSE_HEADERS", &c.ResponseHeaders)
	boolVar("SHADOW_MODE", &c.ShadowMode)
	boolVar("RESPONSE_DYNAMIC_METADATA", &c.DynamicMetadata)
	boolVar("FORCE_START_WITHOUT_INITIAL_CONFIG", &c.ForceStart)
	boolVar("COUNT_REJECTED_HITS", &c.CountRejectedHits)
	durVar("DESCRIPTORS_RELOAD_INTERVAL", &c.ReloadInterval)
	if get("BACKEND_TIMEOUT") != "" {
		durVar("BACKEND_TIMEOUT", &c.BackendTimeout)
	}
	durVar("REST_BACKEND_TIMEOUT", &c.RESTTimeout)
	durVar("CACHE_REFRESH_INTERVAL", &c.CacheRefresh)
	durVar("SHUTDOWN_TIMEOUT", &c.ShutdownTimeout)
	durVar("RLQS_INTERVAL", &c.RLQSInterval)
	errs = append(errs, c.REST.parse(get)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, c.Validate()
}

// Validate checks the settings and fills the parsed fields.
func (c *config) Validate() error {
	var errs []error
	for name, p := range map[string]int{"PORT": c.Port, "GRPC_PORT": c.GRPCPort} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s: %d is not a port (1-65535)", name, p))
		}
	}
	if c.Port == c.GRPCPort {
		errs = append(errs, fmt.Errorf("PORT and GRPC_PORT are both %d", c.Port))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL: empty; use sqlite://PATH or postgres://…"))
	}
	if c.RedisURL != "" && !strings.HasPrefix(c.RedisURL, "redis://") && !strings.HasPrefix(c.RedisURL, "rediss://") {
		errs = append(errs, errors.New("REDIS_URL: must start with redis:// or rediss://"))
	}
	m, err := algorithms.ParseFailureMode(c.failureModeRaw)
	if err != nil {
		errs = append(errs, fmt.Errorf("FAILURE_MODE: %w", err))
	}
	c.FailureMode = m
	c.TrustedProxies = nil
	for _, p := range strings.Split(c.trustedProxiesRaw, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			addr, aerr := netip.ParseAddr(p)
			if aerr != nil {
				errs = append(errs, fmt.Errorf("TRUSTED_PROXIES: %q is not a CIDR such as 10.0.0.0/8", p))
				continue
			}
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		c.TrustedProxies = append(c.TrustedProxies, prefix.Masked())
	}
	if err := c.LogLevel.UnmarshalText([]byte(c.logLevelRaw)); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL: %q is not one of debug, info, warn, error", c.logLevelRaw))
	}
	sets, err := ratelimitheader.ParseSets(c.headerSetsRaw)
	if err != nil {
		errs = append(errs, fmt.Errorf("RATE_LIMIT_HEADERS: %w", err))
	}
	c.HeaderSets = sets
	if c.MaxValueStatsKeys < 0 {
		errs = append(errs, fmt.Errorf("STATS_MAX_VALUE_KEYS: %d must be 0 or more", c.MaxValueStatsKeys))
	}
	if c.MaxDescriptors < 1 {
		errs = append(errs, fmt.Errorf("MAX_DESCRIPTORS_PER_REQUEST: %d must be at least 1", c.MaxDescriptors))
	}
	if c.MaxDescriptorEntries < 1 {
		errs = append(errs, fmt.Errorf("MAX_DESCRIPTOR_ENTRIES: %d must be at least 1", c.MaxDescriptorEntries))
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
	if k := c.AdminKey; k != "" && (len(k) < minAdminKeyLen || strings.HasPrefix(k, clientKeyPrefix)) {
		errs = append(errs, fmt.Errorf("ADMIN_API_KEY: must be at least %d characters and not start with %q (a client's API key is never the operator's)", minAdminKeyLen, clientKeyPrefix))
	}
	if err := checkKeyPrefix(c.CacheKeyPrefix); err != nil {
		errs = append(errs, fmt.Errorf("CACHE_KEY_PREFIX: %w", err))
	}
	if c.RLQSInterval < 100*time.Millisecond || c.RLQSInterval > time.Hour {
		errs = append(errs, fmt.Errorf("RLQS_INTERVAL: %s is not within 100ms-1h (Envoy reports at most every 100ms)", c.RLQSInterval))
	}
	errs = append(errs, c.Tracing.validate()...)
	return errors.Join(errs...)
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
