package refstats

import (
	"regexp"
	"strings"
)

// The stats of one descriptor key, by the reference's names: the last part
// of ratelimit.service.rate_limit.DOMAIN.KEY.STAT.
const (
	TotalHits               = "total_hits"
	OverLimit               = "over_limit"
	NearLimit               = "near_limit"
	WithinLimit             = "within_limit"
	ShadowMode              = "shadow_mode"
	OverLimitWithLocalCache = "over_limit_with_local_cache"
)

// ipv4 finds what looks like an IPv4 address in a stats key: its dots would
// add levels to the stat's name.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statsdSeparators are the characters statsd's line format gives a meaning.
var statsdSeparators = strings.NewReplacer(":", "_", "|", "_")

// sanitize writes a stats key (a domain, or a domain and a descriptor's
// key) as the reference writes it into a stat's name: ':' and '|' become
// '_', and so do the dots of anything shaped like an IPv4 address, such as
// a remote_address value of detailed_metric.
func sanitize(key string) string {
	key = statsdSeparators.Replace(key)
	if !ipv4.MatchString(key) {
		return key
	}
	return ipv4.ReplaceAllStringFunc(key, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// descriptorStat is the name of stat of the descriptor key (domain, key),
// under ratelimit.service.rate_limit: the whole key sanitized, domain
// included, as the reference names it.
func descriptorStat(domain, key, stat string) string {
	return sanitize(domain+"."+key) + "." + stat
}

// methodName is the method of a gRPC full method name
// (/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit →
// ShouldRateLimit), the level of ratelimit_server.METHOD.total_requests;
// "unknown" when it has none.
func methodName(fullMethod string) string {
	_, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return "unknown"
	}
	return method
}
