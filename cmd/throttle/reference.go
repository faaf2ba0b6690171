package main

import (
	"fmt"
	"slices"
	"strings"
)

// referenceSetting is one setting of Envoy's reference rate-limit service
// (envoyproxy/ratelimit, src/settings/settings.go): its variable, its
// default there, and, for a setting that is not one of serveSettings' rows,
// why Throttle has no use for it. Such a setting is accepted whatever its
// value and named once in the log at start (ignoredReferenceSettings); one
// Throttle cannot honour is refused by a row of its own (BACKEND_TYPE).
type referenceSetting struct {
	env, def string
	// ignored says why the setting has no meaning here; empty for a
	// setting serveSettings has a row for.
	ignored string
}

// referenceSettings is every setting of the reference service, in the
// order of its settings.go (at envoyproxy/ratelimit f2fb157, 2026-07-05).
// TestReferenceSettings checks that each is either a row of serveSettings
// or ignored for a reason, and docs/moving-from-envoy-ratelimit.md lists
// them all.
var referenceSettings = []referenceSetting{
	{"HOST", "0.0.0.0", ""},
	{"PORT", "8080", ""},
	{"DEBUG_HOST", "0.0.0.0", ""},
	{"DEBUG_PORT", "6070", ""},
	{"GRPC_UDS", "", ""},
	{"GRPC_HOST", "0.0.0.0", ""},
	{"GRPC_PORT", "8081", ""},
	{"GRPC_MAX_CONNECTION_AGE", "24h", ""},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", ""},
	{"GRPC_SERVER_USE_TLS", "false", ""},
	{"GRPC_SERVER_TLS_CERT", "", ""},
	{"GRPC_SERVER_TLS_KEY", "", ""},
	{"GRPC_CLIENT_TLS_CACERT", "", ""},
	{"GRPC_CLIENT_TLS_SAN", "", ""},
	{"LOG_LEVEL", "WARN", ""},
	{"LOG_FORMAT", "text", ""},
	{"CONFIG_TYPE", "FILE", ""},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", ""},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", ""},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", ""},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", ""},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", ""},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", ""},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", ""},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", ""},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", ""},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", ""},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", ""},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", ""},
	{"USE_DOG_STATSD", "false", ""},
	{"USE_DOG_STATSD_MOGRIFIERS", "", ""},
	{"USE_STATSD", "true", ""},
	{"STATSD_HOST", "localhost", ""},
	{"STATSD_PORT", "8125", ""},
	{"EXTRA_TAGS", "", ""},
	{"STATS_FLUSH_INTERVAL", "10s", ""},
	{"DISABLE_STATS", "false", ""},
	{"USE_PROMETHEUS", "false", ""},
	{"PROMETHEUS_ADDR", ":9090", ""},
	{"PROMETHEUS_PATH", "/metrics", ""},
	{"PROMETHEUS_MAPPER_YAML", "", ""},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", ""},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", ""},
	{"RUNTIME_SUBDIRECTORY", "", ""},
	{"RUNTIME_APPDIRECTORY", "config", ""},
	{"RUNTIME_IGNOREDOTFILES", "false", ""},
	{"RUNTIME_WATCH_ROOT", "true", ""},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", ""},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", ""},
	{"NEAR_LIMIT_RATIO", "0.8", ""},
	{"CACHE_KEY_PREFIX", "", ""},
	{"BACKEND_TYPE", "redis", ""},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", ""},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", ""},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", ""},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", ""},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", ""},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", ""},
	{"REDIS_SOCKET_TYPE", "unix", ""},
	{"REDIS_TYPE", "SINGLE", ""},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", ""},
	{"REDIS_POOL_SIZE", "10", ""},
	{"REDIS_AUTH", "", ""},
	{"REDIS_TLS", "false", ""},
	{"REDIS_TLS_CLIENT_CERT", "", ""},
	{"REDIS_TLS_CLIENT_KEY", "", ""},
	{"REDIS_TLS_CACERT", "", ""},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", ""},
	{"REDIS_PIPELINE_WINDOW", "0", ""},
	{"REDIS_PIPELINE_LIMIT", "0", "deprecated and unused in the reference too"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", "Throttle sends to every Cluster master at once, one round trip each"},
	{"REDIS_PERSECOND", "false", ""},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", ""},
	{"REDIS_PERSECOND_TYPE", "SINGLE", ""},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", ""},
	{"REDIS_PERSECOND_POOL_SIZE", "10", ""},
	{"REDIS_PERSECOND_AUTH", "", ""},
	{"REDIS_PERSECOND_TLS", "false", ""},
	{"REDIS_SENTINEL_AUTH", "", ""},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", ""},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", ""},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", "deprecated and unused in the reference too"},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", "Throttle sends to every Cluster master at once, one round trip each"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", ""},
	{"REDIS_TIMEOUT", "10s", ""},
	{"REDIS_PERSECOND_TIMEOUT", "10s", ""},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "every Redis call has a deadline; a call that cannot get a connection in time is decided by FAILURE_MODE"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "every Redis call has a deadline; a call that cannot get a connection in time is decided by FAILURE_MODE"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "1s", "Throttle starts without waiting for Redis: FAILURE_MODE decides until it answers (and /healthcheck fails meanwhile with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)"},
	{"REDIS_STARTUP_MAX_INTERVAL", "30s", "Throttle starts without waiting for Redis: FAILURE_MODE decides until it answers"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", "Throttle starts without waiting for Redis: FAILURE_MODE decides until it answers"},
	{"MEMCACHE_HOST_PORT", "", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_SRV", "", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_SRV_REFRESH", "0", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_TLS", "false", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_TLS_CACERT", "", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"},
	{"SHADOW_MODE", "false", ""},
	{"QUOTA_MODE", "false", "the reference reads it and never uses it; quota_mode on a descriptor works as there"},
	{"RESPONSE_DYNAMIC_METADATA", "false", ""},
	{"MERGE_DOMAIN_CONFIG", "false", ""},
	{"TRACING_ENABLED", "false", ""},
	{"TRACING_SERVICE_NAME", "RateLimit", ""},
	{"TRACING_SERVICE_NAMESPACE", "", ""},
	{"TRACING_SERVICE_INSTANCE_ID", "", ""},
	{"TRACING_EXPORTER_PROTOCOL", "http", ""},
	{"TRACING_SAMPLING_RATE", "1", ""},
}

// ignoredReferenceSettings returns the names of the reference service's
// settings getenv gives (non-empty) that have no meaning here, in the
// reference's order.
func ignoredReferenceSettings(getenv func(string) string) []string {
	var names []string
	for _, r := range referenceSettings {
		if r.ignored != "" && getenv(r.env) != "" {
			names = append(names, r.env)
		}
	}
	return slices.Clip(names)
}

// referenceTable is the table of docs/moving-from-envoy-ratelimit.md: every
// setting of the reference, its default there, and what Throttle does with
// it (its row's help and default, or why it is ignored).
func referenceTable() string {
	rows := map[string]setting{}
	for _, s := range serveSettings {
		rows[s.env] = s
	}
	var b strings.Builder
	b.WriteString("| setting | the reference's default | in Throttle |\n| --- | --- | --- |\n")
	for _, r := range referenceSettings {
		var does string
		if s, ok := rows[r.env]; ok {
			does = fmt.Sprintf("%s (default %s)", s.usage, markdownValue(s.def))
		} else {
			does = "accepted and ignored (named in the log at start): " + r.ignored
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.env, markdownValue(r.def), strings.ReplaceAll(does, "|", `\|`))
	}
	return b.String()
}

// markdownValue is a default as the docs show it.
func markdownValue(v string) string {
	if v == "" {
		return "empty"
	}
	return "`" + v + "`"
}
