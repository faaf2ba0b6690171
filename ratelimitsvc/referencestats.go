package ratelimitsvc

import "time"

// ReferenceStats receives the stats of Envoy's reference rate-limit service
// (envoyproxy/ratelimit), for a drop-in's dashboards: package refstats
// emits them under the reference's names over statsd, DogStatsD or
// Prometheus. Options.ReferenceStats; nil: none, at no cost.
type ReferenceStats interface {
	// DescriptorCounter returns the counter of stat (total_hits,
	// over_limit, near_limit, within_limit, shadow_mode,
	// over_limit_with_local_cache) of one stats key of domain: the
	// reference's key without the domain, as the metrics' key label,
	// capped as it is (Options.MaxValueStatsKeys). It is called once per
	// key and stat, when the stat is first counted; each decision then adds
	// its hits.
	DescriptorCounter(domain, key, stat string) interface{ Add(uint64) }
	// DomainNotFound counts a request of n descriptors for a domain
	// neither the configuration nor a REST client has.
	DomainNotFound(domain string, n int)
	// RedisError counts a ShouldRateLimit call the counter backend failed:
	// refused for it, or decided in part by FAILURE_MODE.
	RedisError()
	// ServiceError counts a ShouldRateLimit call refused for what it asked
	// (no domain, no descriptors, over the caps) or for want of a
	// configuration.
	ServiceError()
	// GlobalShadowMode counts a call SHADOW_MODE answered OK although it
	// was over a limit.
	GlobalShadowMode()
	// UnaryCall counts one unary call of the gRPC server (ShouldRateLimit,
	// the health check) and how long it took.
	UnaryCall(fullMethod string, took time.Duration)
}

// referenceStat is the reference's name of each family's stat.
var referenceStat = [families]string{
	hitsFamily:                "total_hits",
	overLimitFamily:           "over_limit",
	overLimitLocalCacheFamily: "over_limit_with_local_cache",
	nearLimitFamily:           "near_limit",
	withinLimitFamily:         "within_limit",
	shadowModeFamily:          "shadow_mode",
}

// notFound counts a request of n descriptors for an unknown domain.
func (m *metrics) notFound(domain string, n int) {
	m.domainNotFound.Inc()
	if m.ref != nil {
		m.ref.DomainNotFound(domain, n)
	}
}

// shadowed counts a call global shadow mode answered OK.
func (m *metrics) shadowed() {
	m.globalShadowMode.Inc()
	if m.ref != nil {
		m.ref.GlobalShadowMode()
	}
}

// serviceError counts a call refused for what it asked.
func (m *metrics) serviceError() {
	if m.ref != nil {
		m.ref.ServiceError()
	}
}

// redisError counts a call the counter backend failed.
func (m *metrics) redisError() {
	if m.ref != nil {
		m.ref.RedisError()
	}
}
