package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// setting is one row of serveSettings: an environment variable of `throttle
// serve`, its flag (none for a setting only the reference's deployments
// give), its default (the text a user would give), its help, set, which
// parses a value of it into its field of config (an error says what is
// wrong with the value; the caller names the setting; nil: any value is
// taken), and ref, what the setting is in Envoy's reference service.
type setting struct {
	env, flag, def, usage string
	set                   func(c *config, v string) error
	ref                   upstream
}

// upstream is a setting's counterpart in Envoy's reference rate-limit
// service (envoyproxy/ratelimit, src/settings/settings.go), of the same
// name: its default there, and, for one Throttle accepts without effect,
// why (named once in the log at start when given: inertSettings).
// testdata/reference-settings.txt is the reference's list, in its order;
// TestReferenceSettings checks the rows against it.
type upstream struct {
	named bool   // the reference has this setting
	def   string // its default there
	// inert says why the setting, given, changes nothing here with c; ""
	// (or nil) when it applies.
	inert func(c *config) string
}

// upstream is a setting the reference has too, which applies here.
func upstreamDefault(def string) upstream { return upstream{named: true, def: def} }

// upstreamInert is a setting of the reference accepted without effect,
// always, for the reason why.
func upstreamInert(def, why string) upstream {
	return upstream{named: true, def: def, inert: func(*config) string { return why }}
}

// serveSettings is every setting of `throttle serve`, each in one row: the
// flags, --help, the defaults (setDefaults), docs/settings.md and
// docs/moving-from-envoy-ratelimit.md (tests compare them) all come from
// here. The rows come in groups, each beside the code it configures.
var serveSettings = slices.Concat(coreSettings, redisSettings, listenerSettings, logSettings, backendTypeSettings,
	healthcheckSettings, headerSettings, doorSettings, restAppSettings, runtimeSettings, tlsSettings, tracingSettings,
	referenceTracingSettings, xdsSettings, statsSinkSettings, tenancySettings, inertSettings)

// coreSettings are the listeners, the backends and the APIs' knobs.
var coreSettings = []setting{
	{env: "PORT", flag: "port", def: "8080", ref: upstreamDefault("8080"),
		usage: "REST listen port",
		set:   func(c *config, v string) (err error) { c.Port, err = parseInt(v); return }},
	{env: "GRPC_PORT", flag: "grpc-port", def: "8081", ref: upstreamDefault("8081"),
		usage: "gRPC listen port (Envoy rate-limit service and rate-limit quota service, gRPC health)",
		set:   func(c *config, v string) (err error) { c.GRPCPort, err = parseInt(v); return }},
	{env: "BIND_ADDRESS", flag: "bind-address",
		usage: "address to listen on; empty = all interfaces",
		set:   func(c *config, v string) error { c.BindAddress = v; return nil }},
	{env: "DATABASE_URL", flag: "database-url", def: "sqlite://throttle.db",
		usage: "clients, rules, exemptions: postgres://… or sqlite://PATH, or sqlite://:memory: (lost when the process " +
			"ends; the default when started as ratelimit, the reference service's name)",
		set: func(c *config, v string) error { c.DatabaseURL = v; return nil }},
	{env: "DESCRIPTORS_DIR", flag: "descriptors-dir",
		usage: "folder of Envoy descriptor YAML files (reloaded on change); empty = none",
		set:   func(c *config, v string) error { c.DescriptorsDir = v; return nil }},
	{env: "MERGE_DOMAIN_CONFIG", flag: "merge-domain-config", def: "false", ref: upstreamDefault("false"),
		usage: "let several descriptor files describe one domain",
		set:   func(c *config, v string) (err error) { c.MergeDomains, err = parseBool(v); return }},
	{env: "DESCRIPTORS_RELOAD_INTERVAL", flag: "descriptors-reload-interval", def: "2s",
		usage: "how often DESCRIPTORS_DIR is checked for changes",
		set:   func(c *config, v string) (err error) { c.ReloadInterval, err = parseDuration(v); return }},
	{env: "FAILURE_MODE", flag: "failure-mode", def: "open",
		usage: "when Redis fails: open (admit), closed (reject) or local (this replica's memory counters); /ready then says " +
			"degraded (200), or 503 under closed when no Redis master answers",
		set: func(c *config, v string) (err error) { c.FailureMode, err = algorithms.ParseFailureMode(v); return }},
	{env: "BACKEND_TIMEOUT", flag: "backend-timeout",
		usage: "fixed budget of every Redis call, overriding the derived ones; empty = a gRPC call's own deadline (Envoy's " +
			"grpc-timeout) minus a margin of a fifth (2ms-100ms), REST_BACKEND_TIMEOUT for calls without one",
		set: func(c *config, v string) (err error) { c.BackendTimeout, err = parseOptionalDuration(v); return }},
	{env: "LOCAL_CACHE_SIZE_IN_BYTES", flag: "local-cache-size-in-bytes", def: "8388608", ref: upstreamDefault("0"),
		usage: "memory for the Envoy path's over-limit cache (with REDIS_URL): a descriptor Redis rejected is rejected " +
			"locally until Redis said it could pass; 0 = off",
		set: func(c *config, v string) (err error) { c.LocalCacheBytes, err = parseInt(v); return }},
	{env: "REST_BACKEND_TIMEOUT", flag: "rest-backend-timeout", def: durationText(redisstore.DefaultCallTimeout),
		usage: "budget of a Redis call for a check that brings no deadline (REST /check, gRPC without grpc-timeout); past it: " +
			"503/UNAVAILABLE if Redis answers others (overload), else FAILURE_MODE",
		set: func(c *config, v string) (err error) { c.RESTTimeout, err = parseDuration(v); return }},
	{env: "TRUSTED_PROXIES", flag: "trusted-proxies",
		usage: "comma-separated CIDRs whose X-Forwarded-For/X-Real-IP are believed",
		set:   func(c *config, v string) (err error) { c.TrustedProxies, err = parseCIDRs(v); return }},
	{env: "DEBUG_ADDRESS", flag: "debug-address",
		usage: "host:port of the debug port (Go's profiler at /debug/pprof/, /rlconfig, /stats), in plain HTTP whatever the " +
			"TLS settings, no key asked (keep it on loopback, e.g. 127.0.0.1:6070; an empty host is 127.0.0.1, any other " +
			"than loopback is logged as a warning at start); empty = off",
		set: func(c *config, v string) error { c.DebugAddress = v; return nil }},
	{env: "SHADOW_MODE", flag: "shadow-mode", def: "false", ref: upstreamDefault("false"),
		usage: "answer every gRPC rate-limit request OK: limits are still decided, counted and reported per descriptor, only " +
			"the overall OVER_LIMIT becomes OK; the rate-limit quota service assigns every bucket allow-all (usage still " +
			"counted); GET /rlconfig shows every limit in shadow mode",
		set: func(c *config, v string) (err error) { c.ShadowMode, err = parseBool(v); return }},
	{env: "RESPONSE_DYNAMIC_METADATA", flag: "response-dynamic-metadata", def: "false", ref: upstreamDefault("false"),
		usage: "set dynamic_metadata on gRPC rate-limit responses: the request's domain, descriptors and hits_addend, the " +
			"metadata of the descriptors within their limits, and degraded: true when FAILURE_MODE decided",
		set: func(c *config, v string) (err error) { c.DynamicMetadata, err = parseBool(v); return }},
	{env: "FORCE_START_WITHOUT_INITIAL_CONFIG", flag: "force-start-without-initial-config", def: "false", ref: upstreamDefault("false"),
		usage: "start even when the descriptor folder (DESCRIPTORS_DIR, RUNTIME_*) is missing or does not load, and load it " +
			"when it appears; with CONFIG_TYPE=GRPC_XDS_SOTW, serve before the control plane's first snapshot (without it, " +
			"the ports open after its first answer); until a configuration loads, gRPC requests for domains no client owns " +
			"fail UNAVAILABLE",
		set: func(c *config, v string) (err error) { c.ForceStart, err = parseBool(v); return }},
	{env: "STATS_MAX_VALUE_KEYS", flag: "stats-max-value-keys", def: "1000",
		usage: "most distinct metric keys holding request values (detailed_metric, value_to_metric, limit overrides); further " +
			"values count under the descriptor's configured key; 0 = none",
		set: func(c *config, v string) (err error) { c.MaxValueStatsKeys, err = parseInt(v); return }},
	{env: "MAX_DESCRIPTORS_PER_REQUEST", flag: "max-descriptors-per-request", def: strconv.Itoa(ratelimitsvc.DefaultMaxDescriptors),
		usage: "most descriptors in one gRPC rate-limit request; a request with more is refused INVALID_ARGUMENT, nothing " +
			"counted (Envoy sends a handful)",
		set: func(c *config, v string) (err error) { c.MaxDescriptors, err = parseInt(v); return }},
	{env: "MAX_DESCRIPTOR_ENTRIES", flag: "max-descriptor-entries", def: strconv.Itoa(ratelimitsvc.DefaultMaxDescriptorEntries),
		usage: "most entries in one descriptor of a gRPC rate-limit request; a request with more is refused INVALID_ARGUMENT, " +
			"nothing counted",
		set: func(c *config, v string) (err error) { c.MaxDescriptorEntries, err = parseInt(v); return }},
	{env: "MAX_OVERRIDE_WINDOW", flag: "max-override-window", def: durationText(ratelimitsvc.DefaultMaxOverrideWindow),
		usage: "longest window of a limit override in a gRPC rate-limit request (Envoy's per-descriptor limit); a request " +
			"with a longer one is refused INVALID_ARGUMENT, nothing counted; the default, 30 days, is the reference's " +
			"MONTH: set 8760h to take YEAR (at most 8784h)",
		set: func(c *config, v string) (err error) { c.MaxOverrideWindow, err = parseDuration(v); return }},
	{env: "CACHE_REFRESH_INTERVAL", flag: "cache-refresh-interval", def: "2s",
		usage: "how often rules, exemptions and keys changed on other replicas are picked up",
		set:   func(c *config, v string) (err error) { c.CacheRefresh, err = parseDuration(v); return }},
	{env: "REGISTER_LIMIT_PER_HOUR", flag: "register-limit-per-hour", def: "10",
		usage: "POST /register calls allowed per source per hour: an IPv4 address (IPv4-mapped IPv6 too) or an IPv6 /64",
		set:   func(c *config, v string) (err error) { c.RegisterLimit, err = parseInt64(v); return }},
	{env: "SHUTDOWN_TIMEOUT", flag: "shutdown-timeout", def: "15s",
		usage: "how long SIGTERM waits for in-flight requests",
		set:   func(c *config, v string) (err error) { c.ShutdownTimeout, err = parseDuration(v); return }},
	{env: "ADMIN_API_KEY", flag: "admin-api-key",
		usage: "operator key (at least 16 characters, not a client's thr_ key) for POST /descriptors/{domain}/counters and " +
			"…/reset, which read and reset the Envoy counters of any domain, the YAML's included, and for POST " +
			"/register, which then gives the new client the domain it asks for (one the descriptor configuration does not " +
			"name) and counts no registration limit; no other route takes it; empty = no operator access",
		set: func(c *config, v string) error { c.AdminKey = v; return nil }},
	{env: "CACHE_KEY_PREFIX", flag: "cache-key-prefix", ref: upstreamDefault(""),
		usage: "with REDIS_URL: put before every Redis key, so several deployments share one Redis or Redis Cluster (the " +
			"reference service's setting); no '{', '}', spaces or control characters, at most 64 bytes",
		set: func(c *config, v string) error { c.CacheKeyPrefix = v; return nil }},
	{env: "COUNT_REJECTED_HITS", flag: "count-rejected-hits", def: "false",
		usage: "count every hit of every descriptor of a gRPC rate-limit request, admitted or not, as the reference service " +
			"does; by default a rejected request consumes nothing, from any of its descriptors",
		set: func(c *config, v string) (err error) { c.CountRejectedHits, err = parseBool(v); return }},
	{env: "RLQS_INTERVAL", flag: "rlqs-interval", def: "1s",
		usage: "how often the rate-limit quota service (RLQS, on GRPC_PORT) reassigns every Envoy's share of each limit " +
			"(100ms-1h); set the Envoy filter's reporting_interval to a third of it",
		set: func(c *config, v string) (err error) { c.RLQSInterval, err = parseDuration(v); return }},
	{env: "MAX_RESERVATION_TTL", flag: "max-reservation-ttl", def: durationText(algorithms.DefaultMaxHoldTTL),
		usage: "the longest a reservation may hold quota uncommitted (1s-24h): a REST check's reserve_ttl above it is 400 " +
			"INVALID_FIELD, a descriptor's or a rule's reserve ttl above it does not load",
		set: func(c *config, v string) (err error) {
			c.MaxReservationTTL, err = parseReservationTTL(v)
			c.REST.Reservations.MaxTTL = c.MaxReservationTTL
			return
		}},
	{env: "APPROXIMATE_SYNC_INTERVAL", flag: "approximate-sync-interval", def: durationText(redisstore.DefaultApproximateInterval),
		usage: "with REDIS_URL: how often limits with accuracy: approximate report this replica's hits to Redis and resize " +
			"its lease of each limit (10ms-10s); a replica decides from memory within its lease, and asks Redis at once " +
			"when it runs out",
		set: func(c *config, v string) (err error) { c.ApproximateInterval, err = parseDuration(v); return }},
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
		if s.flag == "" {
			continue
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
	fmt.Fprint(w, "Usage: throttle serve [flags]\n\n"+
		"Serves the REST API on PORT, and Envoy's rate-limit and rate-limit quota services on GRPC_PORT.\n"+
		"With no settings: counters in memory, data in sqlite://throttle.db.\n\n"+
		"Every flag has an environment variable; a flag wins over its variable.\n\n")
	var inert []string
	for _, s := range serveSettings {
		if s.flag == "" {
			inert = append(inert, s.env)
			continue
		}
		def := s.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  --%s (env %s, default %s)\n      %s\n", s.flag, s.env, def, s.usage)
	}
	fmt.Fprintf(w, "\nAccepted from Envoy's reference service, without effect (named in the log at start; docs/moving-from-envoy-ratelimit.md says why): %s.\n", strings.Join(inert, ", "))
	fmt.Fprintf(w, "\nGo's own GOGC (serve's default %d) and GOMEMLIMIT (a soft memory limit, e.g. the container's) are honoured.\n", defaultGCPercent)
}
