package refstats

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
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

// maxKey is the most bytes of a sanitized stats key (a domain, or a
// domain and a descriptor's key): a longer one is cut and ends in a hash
// of it all.
const maxKey = 256

// sanitize writes a stats key (a domain, or a domain and a descriptor's
// key) as the reference writes it into a stat's name — ':' and '|' become
// '_', and so do the dots of anything shaped like an IPv4 address, such as
// a remote_address value of detailed_metric — and makes it safe whatever a
// request put in it: bytes that are not UTF-8, control characters (a
// newline would end the statsd line and start one of the caller's), '#'
// (DogStatsD's tags) and whitespace become '_'; a '.' is never followed by
// two '_' (gostats and DogStatsD read ".__k=v" as a tag k:v); and it is at
// most maxKey bytes (shortKey).
func sanitize(key string) string {
	key = cleanKey(key)
	if ipv4.MatchString(key) {
		key = ipv4.ReplaceAllStringFunc(key, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
	}
	return shortKey(key)
}

// cleanKey is sanitize's replacement of characters, key returned as it is
// when it has none to replace.
func cleanKey(key string) string {
	if clean(key) {
		return key
	}
	var b strings.Builder
	b.Grow(len(key))
	for _, r := range strings.ToValidUTF8(key, "_") {
		switch {
		case r == ':' || r == '|' || r == '#' || unicode.IsControl(r) || unicode.IsSpace(r):
			r = '_'
		}
		if r == '_' && strings.HasSuffix(b.String(), "._") {
			continue // ".__" would start a tag
		}
		b.WriteRune(r)
	}
	return b.String()
}

// clean reports whether key has nothing cleanKey replaces: ASCII without
// control characters, spaces, ':', '|', '#' or ".__".
func clean(key string) bool {
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c <= ' ' || c >= 0x7f || c == ':' || c == '|' || c == '#':
			return false
		case c == '.' && strings.HasPrefix(key[i+1:], "__"):
			return false
		}
	}
	return true
}

// shortKey returns key when it has at most maxKey bytes, else its first
// bytes (whole runes, no '_' at the end) and '_' and 16 hex digits of a
// hash of it all: two long keys stay apart.
func shortKey(key string) string {
	if len(key) <= maxKey {
		return key
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	cut := maxKey - 17
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return fmt.Sprintf("%s_%016x", strings.TrimRight(key[:cut], "_"), h.Sum64())
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
