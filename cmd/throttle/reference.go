package main

import "slices"

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

// pending marks a reference setting whose row is being written.
const pending = "not honoured yet"

// referenceSettings is every setting of the reference service, in the
// order of its settings.go (at envoyproxy/ratelimit f2fb157, 2026-07-05).
// TestReferenceSettings checks that each is either a row of serveSettings
// or ignored for a reason, and docs/moving-from-envoy-ratelimit.md lists
// them all.
var referenceSettings = []referenceSetting{
	{"HOST", "0.0.0.0", pending},
	{"PORT", "8080", ""},
	{"DEBUG_HOST", "0.0.0.0", pending},
	{"DEBUG_PORT", "6070", pending},
	{"GRPC_UDS", "", pending},
	{"GRPC_HOST", "0.0.0.0", pending},
	{"GRPC_PORT", "8081", ""},
	{"GRPC_MAX_CONNECTION_AGE", "24h", pending},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", pending},
	{"GRPC_SERVER_USE_TLS", "false", ""},
	{"GRPC_SERVER_TLS_CERT", "", ""},
	{"GRPC_SERVER_TLS_KEY", "", ""},
	{"GRPC_CLIENT_TLS_CACERT", "", ""},
	{"GRPC_CLIENT_TLS_SAN", "", ""},
	{"LOG_LEVEL", "WARN", ""},
	{"LOG_FORMAT", "text", pending},
	{"CONFIG_TYPE", "FILE", pending},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", ""},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", pending},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", pending},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", pending},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", pending},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", pending},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", pending},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", pending},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", pending},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", pending},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", pending},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", pending},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", pending},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", pending},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", pending},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", pending},
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
	{"RUNTIME_ROOT", "/srv/runtime_data/current", pending},
	{"RUNTIME_SUBDIRECTORY", "", pending},
	{"RUNTIME_APPDIRECTORY", "config", pending},
	{"RUNTIME_IGNOREDOTFILES", "false", pending},
	{"RUNTIME_WATCH_ROOT", "true", pending},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", pending},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", ""},
	{"NEAR_LIMIT_RATIO", "0.8", pending},
	{"CACHE_KEY_PREFIX", "", ""},
	{"BACKEND_TYPE", "redis", pending},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", pending},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", pending},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", pending},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", pending},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", pending},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", pending},
	{"REDIS_SOCKET_TYPE", "unix", pending},
	{"REDIS_TYPE", "SINGLE", pending},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", ""},
	{"REDIS_POOL_SIZE", "10", pending},
	{"REDIS_AUTH", "", pending},
	{"REDIS_TLS", "false", pending},
	{"REDIS_TLS_CLIENT_CERT", "", ""},
	{"REDIS_TLS_CLIENT_KEY", "", ""},
	{"REDIS_TLS_CACERT", "", ""},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", ""},
	{"REDIS_PIPELINE_WINDOW", "0", pending},
	{"REDIS_PIPELINE_LIMIT", "0", "deprecated and unused in the reference too"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", "Throttle sends to every Cluster master at once, one round trip each"},
	{"REDIS_PERSECOND", "false", pending},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", pending},
	{"REDIS_PERSECOND_TYPE", "SINGLE", pending},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", pending},
	{"REDIS_PERSECOND_POOL_SIZE", "10", pending},
	{"REDIS_PERSECOND_AUTH", "", pending},
	{"REDIS_PERSECOND_TLS", "false", pending},
	{"REDIS_SENTINEL_AUTH", "", pending},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", pending},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", pending},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", "deprecated and unused in the reference too"},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", "Throttle sends to every Cluster master at once, one round trip each"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", pending},
	{"REDIS_TIMEOUT", "10s", pending},
	{"REDIS_PERSECOND_TIMEOUT", "10s", pending},
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
	{"TRACING_ENABLED", "false", pending},
	{"TRACING_SERVICE_NAME", "RateLimit", pending},
	{"TRACING_SERVICE_NAMESPACE", "", pending},
	{"TRACING_SERVICE_INSTANCE_ID", "", pending},
	{"TRACING_EXPORTER_PROTOCOL", "http", pending},
	{"TRACING_SAMPLING_RATE", "1", pending},
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
