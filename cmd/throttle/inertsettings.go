package main

import (
	"slices"
)

// The reasons settings of the reference service change nothing here.
const (
	noMemcache     = "Throttle has no memcached backend (BACKEND_TYPE=memcache is refused)"
	noPipelineCap  = "deprecated and unused in the reference too"
	allMasters     = "Throttle sends to every Cluster master at once, one round trip each"
	noPoolWait     = "every Redis call has a deadline; a call that cannot get a connection in time is decided by FAILURE_MODE"
	noStartupWait  = "Throttle starts without waiting for Redis: FAILURE_MODE decides until it answers"
	noPipelineWait = "Throttle already sends the checks that arrive while a call to Redis is out together in the next call, without waiting for a window"
)

// inertSettings are the reference service's settings Throttle has no use
// for and no row elsewhere: accepted whatever their value (no flag), and
// named once in the log at start when given. A setting Throttle cannot
// honour is refused by a row of its own (BACKEND_TYPE=memcache).
var inertSettings = []setting{
	{env: "REDIS_PIPELINE_LIMIT", ref: upstreamInert("0", noPipelineCap)},
	{env: "REDIS_CLUSTER_PIPELINE_PARALLELISM", ref: upstreamInert("1", allMasters)},
	{env: "REDIS_PERSECOND_PIPELINE_LIMIT", ref: upstreamInert("0", noPipelineCap)},
	{env: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", ref: upstreamInert("1", allMasters)},
	{env: "REDIS_POOL_ON_EMPTY_BEHAVIOR", ref: upstreamInert("WAIT", noPoolWait)},
	{env: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", ref: upstreamInert("WAIT", noPoolWait)},
	{env: "REDIS_STARTUP_INITIAL_INTERVAL", ref: upstreamInert("1s", noStartupWait+" (and /healthcheck fails meanwhile with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)")},
	{env: "REDIS_STARTUP_MAX_INTERVAL", ref: upstreamInert("30s", noStartupWait)},
	{env: "REDIS_STARTUP_MAX_ELAPSED_TIME", ref: upstreamInert("0", noStartupWait)},
	{env: "MEMCACHE_HOST_PORT", ref: upstreamInert("", noMemcache)},
	{env: "MEMCACHE_MAX_IDLE_CONNS", ref: upstreamInert("2", noMemcache)},
	{env: "MEMCACHE_SRV", ref: upstreamInert("", noMemcache)},
	{env: "MEMCACHE_SRV_REFRESH", ref: upstreamInert("0", noMemcache)},
	{env: "MEMCACHE_TLS", ref: upstreamInert("false", noMemcache)},
	{env: "MEMCACHE_TLS_CLIENT_CERT", ref: upstreamInert("", noMemcache)},
	{env: "MEMCACHE_TLS_CLIENT_KEY", ref: upstreamInert("", noMemcache)},
	{env: "MEMCACHE_TLS_CACERT", ref: upstreamInert("", noMemcache)},
	{env: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", ref: upstreamInert("false", noMemcache)},
	{env: "QUOTA_MODE", ref: upstreamInert("false", "the reference reads it and never uses it; quota_mode on a descriptor works as there")},
}

// inertGiven returns the names of the settings given that change nothing
// here with c (their rows' ref.inert), in the rows' order, for the log.
func inertGiven(c *config, given map[string]string) []string {
	var names []string
	for _, s := range serveSettings {
		if _, ok := given[s.env]; ok && s.ref.inert != nil && s.ref.inert(c) != "" {
			names = append(names, s.env)
		}
	}
	return slices.Clip(names)
}
