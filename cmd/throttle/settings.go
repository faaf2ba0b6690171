package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// setting is one row of serveSettings: an environment variable of `throttle
// serve`, its flag, its default (the text a user would give), its help, and
// set, which parses a value of it into its field of config (an error says
// what is wrong with the value; the caller names the setting).
type setting struct {
	env, flag, def, usage string
	set                   func(c *config, v string) error
}

// serveSettings is every setting of `throttle serve`, each in one row: the
// flags, --help, the defaults (setDefaults) and docs/settings.md (a test
// compares them) all come from here. The rows come in groups, each beside
// the code it configures; the reference service's settings Throttle has no
// use for are not rows but referenceSettings entries (reference.go).
var serveSettings = slices.Concat(coreSettings, redisSettings, listenerSettings, doorSettings, runtimeSettings, tlsSettings, tracingSettings, referenceTracingSettings, xdsSettings, statsSettings, tenancySettings)

// coreSettings are the listeners, the backends and the APIs' knobs.
var coreSettings = []setting{
	{"PORT", "port", "8080", "REST listen port", func(c *config, v string) (err error) { c.Port, err = parseInt(v); return }},
	{"GRPC_PORT", "grpc-port", "8081", "gRPC listen port (Envoy rate-limit service and rate-limit quota service, gRPC health)", func(c *config, v string) (err error) { c.GRPCPort, err = parseInt(v); return }},
	{"BIND_ADDRESS", "bind-address", "", "address to listen on; empty = all interfaces", func(c *config, v string) error { c.BindAddress = v; return nil }},
	{"DATABASE_URL", "database-url", "sqlite://throttle.db", "clients, rules, exemptions: postgres://… or sqlite://PATH, or sqlite://:memory: (lost when the process ends; the default when started as ratelimit, the reference service's name)", func(c *config, v string) error { c.DatabaseURL = v; return nil }},
	{"DESCRIPTORS_DIR", "descriptors-dir", "", "folder of Envoy descriptor YAML files (reloaded on change); empty = none", func(c *config, v string) error { c.DescriptorsDir = v; return nil }},
	{"MERGE_DOMAIN_CONFIG", "merge-domain-config", "false", "let several descriptor files describe one domain", func(c *config, v string) (err error) { c.MergeDomains, err = parseBool(v); return }},
	{"DESCRIPTORS_RELOAD_INTERVAL", "descriptors-reload-interval", "2s", "how often DESCRIPTORS_DIR is checked for changes", func(c *config, v string) (err error) { c.ReloadInterval, err = parseDuration(v); return }},
	{"FAILURE_MODE", "failure-mode", "open", "when Redis fails: open (admit), closed (reject) or local (this replica's memory counters); /ready then says degraded (200), or 503 under closed when no Redis master answers", func(c *config, v string) (err error) { c.FailureMode, err = algorithms.ParseFailureMode(v); return }},
	{"BACKEND_TIMEOUT", "backend-timeout", "", "fixed budget of every Redis call, overriding the derived ones; empty = a gRPC call's own deadline (Envoy's grpc-timeout) minus a margin of a fifth (2ms-100ms), REST_BACKEND_TIMEOUT for calls without one", func(c *config, v string) (err error) { c.BackendTimeout, err = parseOptionalDuration(v); return }},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "local-cache-size-in-bytes", "8388608", "memory for the Envoy path's over-limit cache (with REDIS_URL): a descriptor Redis rejected is rejected locally until Redis said it could pass; 0 = off", func(c *config, v string) (err error) { c.LocalCacheBytes, err = parseInt(v); return }},
	{"REST_BACKEND_TIMEOUT", "rest-backend-timeout", "500ms", "budget of a Redis call for a check that brings no deadline (REST /check, gRPC without grpc-timeout); past it: 503/UNAVAILABLE if Redis answers others (overload), else FAILURE_MODE", func(c *config, v string) (err error) { c.RESTTimeout, err = parseDuration(v); return }},
	{"TRUSTED_PROXIES", "trusted-proxies", "", "comma-separated CIDRs whose X-Forwarded-For/X-Real-IP are believed", func(c *config, v string) (err error) { c.TrustedProxies, err = parseCIDRs(v); return }},
	{"LOG_LEVEL", "log-level", "info", "debug, info, warn or error", func(c *config, v string) (err error) { c.LogLevel, err = parseLogLevel(v); return }},
	{"DEBUG_ADDRESS", "debug-address", "", "host:port of the debug port (Go's profiler at /debug/pprof/, /rlconfig, /stats), in plain HTTP whatever the TLS settings, no key asked (keep it on loopback, e.g. 127.0.0.1:6070; an empty host is 127.0.0.1, any other than loopback is logged as a warning at start); empty = off", func(c *config, v string) error { c.DebugAddress = v; return nil }},
	{"RATE_LIMIT_HEADERS", "rate-limit-headers", "both", "rate-limit headers on REST /check, /check/ip and /register replies, and on gRPC responses with RATE_LIMIT_RESPONSE_HEADERS: x (X-RateLimit-* only), ietf (only RateLimit-Policy and RateLimit of draft-ietf-httpapi-ratelimit-headers-11) or both; Retry-After comes with every rejection whatever this says", func(c *config, v string) (err error) { c.HeaderSets, err = ratelimitheader.ParseSets(v); return }},
	{"RATE_LIMIT_RESPONSE_HEADERS", "rate-limit-response-headers", "false", "add the RATE_LIMIT_HEADERS headers (and Retry-After when over the limit, RateLimit-Degraded: true when FAILURE_MODE decided) to gRPC rate-limit responses, for Envoy to add to its reply", func(c *config, v string) (err error) { c.ResponseHeaders, err = parseBool(v); return }},
	{"SHADOW_MODE", "shadow-mode", "false", "answer every gRPC rate-limit request OK: limits are still decided, counted and reported per descriptor, only the overall OVER_LIMIT becomes OK; the rate-limit quota service assigns every bucket allow-all (usage still counted); GET /rlconfig shows every limit in shadow mode", func(c *config, v string) (err error) { c.ShadowMode, err = parseBool(v); return }},
	{"RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata", "false", "set dynamic_metadata on gRPC rate-limit responses: the request's domain, descriptors and hits_addend, the metadata of the descriptors within their limits, and degraded: true when FAILURE_MODE decided", func(c *config, v string) (err error) { c.DynamicMetadata, err = parseBool(v); return }},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "force-start-without-initial-config", "false", "start even when the descriptor folder (DESCRIPTORS_DIR, RUNTIME_*) is missing or does not load, and load it when it appears; with CONFIG_TYPE=GRPC_XDS_SOTW, serve before the control plane's first snapshot (without it, the ports open after its first answer); until a configuration loads, gRPC requests for domains no client owns fail UNAVAILABLE", func(c *config, v string) (err error) { c.ForceStart, err = parseBool(v); return }},
	{"STATS_MAX_VALUE_KEYS", "stats-max-value-keys", "1000", "most distinct metric keys holding request values (detailed_metric, value_to_metric, limit overrides); further values count under the descriptor's configured key; 0 = none", func(c *config, v string) (err error) { c.MaxValueStatsKeys, err = parseInt(v); return }},
	{"MAX_DESCRIPTORS_PER_REQUEST", "max-descriptors-per-request", strconv.Itoa(ratelimitsvc.DefaultMaxDescriptors), "most descriptors in one gRPC rate-limit request; a request with more is refused INVALID_ARGUMENT, nothing counted (Envoy sends a handful)", func(c *config, v string) (err error) { c.MaxDescriptors, err = parseInt(v); return }},
	{"MAX_DESCRIPTOR_ENTRIES", "max-descriptor-entries", strconv.Itoa(ratelimitsvc.DefaultMaxDescriptorEntries), "most entries in one descriptor of a gRPC rate-limit request; a request with more is refused INVALID_ARGUMENT, nothing counted", func(c *config, v string) (err error) { c.MaxDescriptorEntries, err = parseInt(v); return }},
	{"MAX_OVERRIDE_WINDOW", "max-override-window", "720h", "longest window of a limit override in a gRPC rate-limit request (Envoy's per-descriptor limit); a request with a longer one is refused INVALID_ARGUMENT, nothing counted; the default, 30 days, is the reference's MONTH: set 8760h to take YEAR (at most 8784h)", func(c *config, v string) (err error) { c.MaxOverrideWindow, err = parseDuration(v); return }},
	{"CACHE_REFRESH_INTERVAL", "cache-refresh-interval", "2s", "how often rules, exemptions and keys changed on other replicas are picked up", func(c *config, v string) (err error) { c.CacheRefresh, err = parseDuration(v); return }},
	{"REGISTER_LIMIT_PER_HOUR", "register-limit-per-hour", "10", "POST /register calls allowed per source per hour: an IPv4 address (IPv4-mapped IPv6 too) or an IPv6 /64", func(c *config, v string) (err error) { c.RegisterLimit, err = parseInt64(v); return }},
	{"SHUTDOWN_TIMEOUT", "shutdown-timeout", "15s", "how long SIGTERM waits for in-flight requests", func(c *config, v string) (err error) { c.ShutdownTimeout, err = parseDuration(v); return }},
	{"ADMIN_API_KEY", "admin-api-key", "", "operator key (at least 16 characters, not a client's thr_ key) for POST /descriptors/{domain}/counters and …/reset, which read and reset the Envoy counters of any domain, the YAML's included, and for POST /register, which then gives the new client the domain it asks for (one the descriptor configuration does not name) and counts no registration limit; no other route takes it; empty = no operator access", func(c *config, v string) error { c.AdminKey = v; return nil }},
	{"CACHE_KEY_PREFIX", "cache-key-prefix", "", "with REDIS_URL: put before every Redis key, so several deployments share one Redis or Redis Cluster (the reference service's setting); no '{', '}', spaces or control characters, at most 64 bytes", func(c *config, v string) error { c.CacheKeyPrefix = v; return nil }},
	{"COUNT_REJECTED_HITS", "count-rejected-hits", "false", "count every hit of every descriptor of a gRPC rate-limit request, admitted or not, as the reference service does; by default a rejected request consumes nothing, from any of its descriptors", func(c *config, v string) (err error) { c.CountRejectedHits, err = parseBool(v); return }},
	{"CORS_ALLOWED_ORIGIN", "cors-allowed-origin", "", "comma-separated origins (https://app.example.com, or *) whose browser pages may call the REST API: preflights answered, rate-limit headers exposed; empty = no cross-origin access", func(c *config, v string) (err error) { c.REST.CORSAllowedOrigins, err = parseOrigins(v); return }},
	{"LIST_RESPONSE_FORMAT", "list-response-format", "array", "GET /rules/list and /exemptions/list answer bare arrays (array), or {\"rules\": [...]} and {\"exemptions\": [...]} as the original service did (object)", func(c *config, v string) (err error) { c.REST.ListObjects, err = parseListFormat(v); return }},
	{"IDEMPOTENCY_TTL", "idempotency-ttl", "24h", "how long a REST check's first reply is kept for its Idempotency-Key (in Redis with REDIS_URL, else in memory)", func(c *config, v string) (err error) { c.REST.IdempotencyTTL, err = parseIdempotencyTTL(v); return }},
	{"IDEMPOTENCY_MAX_RECORDS_PER_CLIENT", "idempotency-max-records-per-client", "1000", "most Idempotency-Key replies one client keeps (in Redis or memory); one more evicts that client's oldest, whose retry is then decided anew", func(c *config, v string) (err error) { c.REST.IdempotencyQuota.Records, err = parsePositive(v); return }},
	{"IDEMPOTENCY_MAX_BYTES_PER_CLIENT", "idempotency-max-bytes-per-client", "1048576", "most bytes of Idempotency-Key replies one client keeps (replies are stored compressed); past it that client's oldest are evicted", func(c *config, v string) (err error) {
		n, err := parsePositive(v)
		c.REST.IdempotencyQuota.Bytes = int64(n)
		return err
	}},
	{"IDEMPOTENCY_MAX_BYTES_TOTAL", "idempotency-max-bytes-total", "268435456", "without REDIS_URL: most bytes of Idempotency-Key replies all clients keep in this replica's memory; past it a reply is not kept (its retry is decided anew) and no client's are evicted for another's (in Redis, MAX_CLIENTS × IDEMPOTENCY_MAX_BYTES_PER_CLIENT and IDEMPOTENCY_REDIS_MEMORY_PERCENT bound them)", func(c *config, v string) (err error) {
		n, err := parsePositive(v)
		c.REST.IdempotencyQuota.TotalBytes = int64(n)
		return err
	}},
	{"IDEMPOTENCY_REDIS_MEMORY_PERCENT", "idempotency-redis-memory-percent", "80", "no Idempotency-Key reply is kept in Redis while its used memory is at or past this percent of its maxmemory, so the records never take the counters' room (with maxmemory-policy noeviction); 100 turns the budget off", func(c *config, v string) (err error) { c.REST.IdempotencyMemoryPercent, err = parsePercent(v); return }},
	{"RESERVATION_MAX_FRACTION", "reservation-max-fraction", "0.5", "largest share of its limit one reservation may hold, above 0 and at most 1; more is 400 INVALID_FIELD", func(c *config, v string) (err error) {
		c.REST.Reservations.MaxFraction, err = parseShare(v)
		return
	}},
	{"RESERVATION_MAX_OUTSTANDING_PER_CLIENT", "reservation-max-outstanding-per-client", "1000", "most reservations one client may have outstanding (neither settled nor expired) on every replica together (counted in Redis with REDIS_URL, else per replica); one more is 429 TOO_MANY_RESERVATIONS, nothing counted", func(c *config, v string) (err error) {
		c.REST.Reservations.MaxOutstanding, err = parsePositive(v)
		return
	}},
	{"RLQS_INTERVAL", "rlqs-interval", "1s", "how often the rate-limit quota service (RLQS, on GRPC_PORT) reassigns every Envoy's share of each limit (100ms-1h); set the Envoy filter's reporting_interval to a third of it", func(c *config, v string) (err error) { c.RLQSInterval, err = parseDuration(v); return }},
	{"MAX_RESERVATION_TTL", "max-reservation-ttl", "60s", "the longest a reservation may hold quota uncommitted (1s-24h): a REST check's reserve_ttl above it is 400 INVALID_FIELD, a descriptor's or a rule's reserve ttl above it does not load", func(c *config, v string) (err error) {
		c.MaxReservationTTL, err = parseReservationTTL(v)
		c.REST.Reservations.MaxTTL = c.MaxReservationTTL
		return
	}},
	{"APPROXIMATE_SYNC_INTERVAL", "approximate-sync-interval", "100ms", "with REDIS_URL: how often limits with accuracy: approximate report this replica's hits to Redis and resize its lease of each limit (10ms-10s); a replica decides from memory within its lease, and asks Redis at once when it runs out", func(c *config, v string) (err error) { c.ApproximateInterval, err = parseDuration(v); return }},
}

// tlsSettings are transport security, with the reference service's names
// (tls.go).
var tlsSettings = []setting{
	{"GRPC_SERVER_USE_TLS", "grpc-server-use-tls", "false", "serve TLS (1.2 or later) on GRPC_PORT, with GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY", func(c *config, v string) (err error) { c.TLS.GRPCUseTLS, err = parseBool(v); return }},
	{"GRPC_SERVER_TLS_CERT", "grpc-server-tls-cert", "", "PEM file of the certificate (and its chain) served on GRPC_PORT; read again within 10s of a change (a change that does not load keeps the last good pair)", func(c *config, v string) error { c.TLS.GRPCCert = v; return nil }},
	{"GRPC_SERVER_TLS_KEY", "grpc-server-tls-key", "", "PEM file of GRPC_SERVER_TLS_CERT's private key", func(c *config, v string) error { c.TLS.GRPCKey = v; return nil }},
	{"GRPC_CLIENT_TLS_CACERT", "grpc-client-tls-cacert", "", "PEM file of CA certificates: gRPC clients must present a certificate one of them signed (mTLS); read again on change; empty = no client certificate asked", func(c *config, v string) error { c.TLS.GRPCClientCA = v; return nil }},
	{"GRPC_CLIENT_TLS_SAN", "grpc-client-tls-san", "", "comma-separated DNS or URI SANs (such as spiffe://cluster.local/ns/gw/sa/envoy): a gRPC client certificate must carry one of them; empty = any GRPC_CLIENT_TLS_CACERT signed", func(c *config, v string) (err error) { c.TLS.GRPCClientSANs, err = parseList(v); return }},
	{"HTTP_TLS_CERT", "http-tls-cert", "", "PEM file of the certificate (and its chain) of HTTPS on PORT (REST API, dashboard, /metrics, /health), with HTTP_TLS_KEY; read again on change; empty = plain HTTP", func(c *config, v string) error { c.TLS.HTTPCert = v; return nil }},
	{"HTTP_TLS_KEY", "http-tls-key", "", "PEM file of HTTP_TLS_CERT's private key", func(c *config, v string) error { c.TLS.HTTPKey = v; return nil }},
	{"HTTP_CLIENT_TLS_CACERT", "http-client-tls-cacert", "", "PEM file of CA certificates: HTTPS clients on PORT (probes too) must present a certificate one of them signed; read again on change; empty = none asked", func(c *config, v string) error { c.TLS.HTTPClientCA = v; return nil }},
	{"REDIS_TLS_CACERT", "redis-tls-cacert", "", "with TLS to Redis (a rediss:// URL, or REDIS_TLS=true): PEM file of the CA certificates Redis's certificate must chain to (every node, Sentinels too); read again on change; empty = the system's roots", func(c *config, v string) error { c.TLS.RedisCA = v; return nil }},
	{"REDIS_TLS_CLIENT_CERT", "redis-tls-client-cert", "", "with TLS to Redis: PEM file of the client certificate presented to Redis (tls-auth-clients), with REDIS_TLS_CLIENT_KEY; read again on change", func(c *config, v string) error { c.TLS.RedisCert = v; return nil }},
	{"REDIS_TLS_CLIENT_KEY", "redis-tls-client-key", "", "PEM file of REDIS_TLS_CLIENT_CERT's private key", func(c *config, v string) error { c.TLS.RedisKey = v; return nil }},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "redis-tls-skip-hostname-verification", "false", "with TLS to Redis: check that Redis's certificate chains to REDIS_TLS_CACERT, but not that it names the REDIS_URL host (Cluster nodes announced by IP address)", func(c *config, v string) (err error) { c.TLS.RedisSkipHostname, err = parseBool(v); return }},
}

// tracingSettings are OpenTelemetry's standard variables, named by its
// specification (tracing.go).
var tracingSettings = []setting{
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "otel-exporter-otlp-endpoint", "", "OpenTelemetry tracing: base URL of the OTLP receiver, such as http://collector:4318 (http/protobuf; /v1/traces is appended) or http://collector:4317 (grpc); https:// uses TLS with the system's roots; empty = tracing off (no spans, no cost)", func(c *config, v string) (err error) { c.Tracing.baseEndpoint, err = parseOTLPURL(v); return }},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel-exporter-otlp-traces-endpoint", "", "URL for traces, used as it is (http/protobuf: with its path, such as http://collector:4318/v1/traces); wins over OTEL_EXPORTER_OTLP_ENDPOINT, and alone turns tracing on too", func(c *config, v string) (err error) { c.Tracing.Endpoint, err = parseOTLPURL(v); return }},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "otel-exporter-otlp-protocol", protocolHTTP, "OTLP transport: grpc or http/protobuf", func(c *config, v string) (err error) { c.Tracing.baseProtocol, err = parseOTLPProtocol(v); return }},
	{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "otel-exporter-otlp-traces-protocol", "", "OTLP transport for traces; empty = OTEL_EXPORTER_OTLP_PROTOCOL", func(c *config, v string) (err error) { c.Tracing.Protocol, err = parseOTLPProtocol(v); return }},
	{"OTEL_EXPORTER_OTLP_HEADERS", "otel-exporter-otlp-headers", "", "headers of every OTLP request (such as the tracing backend's API key): key=value pairs, comma-separated, values percent-encoded; never logged", func(c *config, v string) (err error) { c.Tracing.Headers, err = parseKeyValues(v); return }},
	{"OTEL_SERVICE_NAME", "otel-service-name", "throttle", "service.name of the spans (wins over one in OTEL_RESOURCE_ATTRIBUTES)", func(c *config, v string) (err error) { c.Tracing.ServiceName, err = parseNonEmpty(v); return }},
	{"OTEL_RESOURCE_ATTRIBUTES", "otel-resource-attributes", "", "more resource attributes of the spans: key=value pairs, comma-separated, values percent-encoded (such as deployment.environment.name=prod)", func(c *config, v string) (err error) { c.Tracing.Resource, err = parseAttributes(v); return }},
	{"OTEL_TRACES_SAMPLER", "otel-traces-sampler", "parentbased_always_on", "which traces are recorded: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio (parentbased_*: follow the caller's sampled flag when it sends a traceparent)", func(c *config, v string) (err error) { c.Tracing.Sampler, err = parseSampler(v); return }},
	{"OTEL_TRACES_SAMPLER_ARG", "otel-traces-sampler-arg", "", "the ratio of traces the traceidratio samplers record, 0 to 1; empty = 1", func(c *config, v string) (err error) { c.Tracing.SamplerArg, err = parseRatio(v); return }},
}

// readSettings returns the value of every setting given in args (a flag)
// or by getenv (non-empty), by variable name, a flag winning over its
// variable. --help prints every setting with its default (flag.ErrHelp).
func readSettings(args []string, getenv func(string) string, stderr io.Writer) (map[string]string, error) {
	given := map[string]string{}
	fs := flag.NewFlagSet("throttle serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range serveSettings {
		if v := getenv(s.env); v != "" {
			given[s.env] = strings.TrimSpace(v)
		}
		fs.Func(s.flag, s.usage, func(v string) error {
			given[s.env] = strings.TrimSpace(v)
			return nil
		})
	}
	fs.Usage = func() { printUsage(stderr) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return given, nil
}

// printUsage is `throttle serve --help`: every setting, its variable and
// its default.
func printUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: throttle serve [flags]\n\nServes the REST API on PORT, and Envoy's rate-limit and rate-limit quota services on GRPC_PORT.\nWith no settings: counters in memory, data in sqlite://throttle.db.\n\nEvery flag has an environment variable; a flag wins over its variable.\n\n")
	for _, s := range serveSettings {
		def := s.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  --%s (env %s, default %s)\n      %s\n", s.flag, s.env, def, s.usage)
	}
	fmt.Fprintf(w, "\nGo's own GOGC (serve's default %d) and GOMEMLIMIT (a soft memory limit, e.g. the container's) are honoured.\n", defaultGCPercent)
}

// The parsers of the settings' types. Each error says what is wrong with
// the value; the caller puts the setting's name before it.

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return n, nil
}

// parsePercent reads an integer from 1 to 100.
func parsePercent(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("%q is not a percent from 1 to 100", v)
	}
	return n, nil
}

func parseInt64(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q is not true or false", v)
	}
	return b, nil
}

// parseDuration reads a positive duration.
func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 2s or 15ms", v)
	}
	return d, nil
}

// parseOptionalDuration is parseDuration, with empty meaning 0 (none).
func parseOptionalDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	return parseDuration(v)
}

// parseCIDRs reads comma-separated CIDRs; a bare address is its own /32 or
// /128.
func parseCIDRs(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			addr, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", p)
			}
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}

// parseLogLevel reads debug, info, warn or error in any case, and the
// reference service's (logrus's) other names: warning, trace (as debug),
// fatal and panic (as error).
func parseLogLevel(v string) (slog.Level, error) {
	switch strings.ToLower(v) {
	case "trace":
		return slog.LevelDebug, nil
	case "warning":
		return slog.LevelWarn, nil
	case "fatal", "panic":
		return slog.LevelError, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return 0, fmt.Errorf("%q is not one of debug, info, warn, error", v)
	}
	return l, nil
}

func parseNonEmpty(v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("empty")
	}
	return v, nil
}

// parseReservationTTL reads MAX_RESERVATION_TTL: a duration above 0, at
// most algorithms.MaxHoldTTL.
func parseReservationTTL(v string) (time.Duration, error) {
	d, err := parseDuration(v)
	if err == nil && d > algorithms.MaxHoldTTL {
		err = fmt.Errorf("%q is longer than %s", v, algorithms.MaxHoldTTL)
	}
	return d, err
}

// parseShare reads a number above 0 and at most 1.
func parseShare(v string) (float64, error) {
	f, err := parseFraction(v)
	if err != nil || f == 0 {
		return 0, fmt.Errorf("%q is not a number above 0 and at most 1", v)
	}
	return f, nil
}
