package xdstest

import (
	"strconv"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The listener domain and route descriptor of Envoy AI Gateway's
// examples/token_ratelimit, as Envoy Gateway names them: a
// BackendTrafficPolicy on the Gateway applies to its route, so its rules
// are the route's, in the listener's domain.
const (
	AIGatewayDomain = "default/envoy-ai-gateway-token-ratelimit/http"
	AIGatewayRoute  = "httproute/default/envoy-ai-gateway-token-ratelimit/rule/0/match/0/*"
)

// AIGatewayTokens is the RateLimitConfig Envoy Gateway's translator
// (internal/xds/translator/ratelimit.go, buildRateLimitServiceDescriptors)
// makes of Envoy AI Gateway's examples/token_ratelimit policy with one
// selector added to each rule: per rule i of limits[i] tokens per hour,
// clientSelectors headers x-tenant-id Distinct (rule-i-match-0, a key and
// no value) then x-request-id Distinct (rule-i-match-1, the limit), under
// the route's descriptor.
func AIGatewayTokens(limits ...uint32) *rlsconf.RateLimitConfig {
	route := &rlsconf.RateLimitDescriptor{Key: AIGatewayRoute, Value: AIGatewayRoute}
	for i, n := range limits {
		route.Descriptors = append(route.Descriptors, &rlsconf.RateLimitDescriptor{
			Key: aiRuleMatch(i, 0),
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: aiRuleMatch(i, 1), RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: n},
			}},
		})
	}
	return &rlsconf.RateLimitConfig{Name: AIGatewayDomain, Domain: AIGatewayDomain, Descriptors: []*rlsconf.RateLimitDescriptor{route}}
}

// AIGatewayDescriptor is the descriptor Envoy sends for rule i of
// AIGatewayTokens (the route's generic_key, then a request_headers entry
// per Distinct selector) with a per-descriptor hits_addend: 0 on the
// request path (cost.request.number: 0), the tokens used on the response
// path (apply_on_stream_done, cost.response from metadata).
func AIGatewayDescriptor(rule int, tenant, requestID string, hits uint64) *rlcommon.RateLimitDescriptor {
	return &rlcommon.RateLimitDescriptor{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{
			{Key: AIGatewayRoute, Value: AIGatewayRoute},
			{Key: aiRuleMatch(rule, 0), Value: tenant},
			{Key: aiRuleMatch(rule, 1), Value: requestID},
		},
		HitsAddend: wrapperspb.UInt64(hits),
	}
}

// aiRuleMatch is Envoy Gateway's descriptor key of a rule's selector.
func aiRuleMatch(rule, match int) string {
	return "rule-" + strconv.Itoa(rule) + "-match-" + strconv.Itoa(match)
}
