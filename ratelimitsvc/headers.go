package ratelimitsvc

import (
	"fmt"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
)

// The response's response_headers_to_add, which Envoy adds to the
// upstream's reply when the request passes and to its own 429 when it does
// not, are made by header sets, each from the descriptors' statuses and the
// limits that applied (prepared: per descriptor, or nil). Options chooses
// them once (headerSets), in the order their headers are added:
//
//   - with RATE_LIMIT_RESPONSE_HEADERS and sets x or both, X-RateLimit-Limit,
//     -Remaining and -Reset of the most restrictive descriptor
//     (rateLimitHeaders);
//   - with sets ietf or both, the draft's RateLimit-Policy and RateLimit with
//     one list member per limit of each descriptor a limit applied to, in
//     request order (ietfHeaders);
//   - with RATE_LIMIT_RESPONSE_HEADERS, whatever sets says: Retry-After when
//     the overall code is OVER_LIMIT (the seconds until the request could
//     pass), and RateLimit-Degraded: true when the failure policy decided a
//     limit of any descriptor (FAILURE_MODE, the backend down; the header
//     REST replies carry too);
//   - with LIMIT_RESPONSE_HEADERS_ENABLED, the reference service's three
//     headers under their configured names (limitHeaders, refheaders.go).

// headerSet is one set of response headers.
type headerSet func(resp *rlsv3.RateLimitResponse, prepared []*limited) []*corev3.HeaderValue

// headerSets are the header sets opts chooses, in the order above.
func headerSets(opts *Options) []headerSet {
	var sets []headerSet
	if opts.ResponseHeaders {
		if opts.HeaderSets.SendsX() {
			sets = append(sets, func(resp *rlsv3.RateLimitResponse, _ []*limited) []*corev3.HeaderValue {
				return rateLimitHeaders(resp.Statuses)
			})
		}
		if opts.HeaderSets.SendsIETF() {
			sets = append(sets, func(resp *rlsv3.RateLimitResponse, prepared []*limited) []*corev3.HeaderValue {
				return ietfHeaders(resp.Statuses, prepared)
			})
		}
		sets = append(sets, retryAfterHeader, degradedHeaders)
	}
	if names := opts.LimitHeaders; names != nil {
		sets = append(sets, func(resp *rlsv3.RateLimitResponse, prepared []*limited) []*corev3.HeaderValue {
			return limitHeaders(names, resp.Statuses, prepared)
		})
	}
	return sets
}

// responseHeaders are the headers of every set of sets for resp.
func responseHeaders(sets []headerSet, resp *rlsv3.RateLimitResponse, prepared []*limited) []*corev3.HeaderValue {
	var out []*corev3.HeaderValue
	for _, set := range sets {
		out = append(out, set(resp, prepared)...)
	}
	return out
}

// retryAfterHeader is Retry-After of an OVER_LIMIT response (retryAfter),
// none when it would be 0.
func retryAfterHeader(resp *rlsv3.RateLimitResponse, prepared []*limited) []*corev3.HeaderValue {
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		return nil
	}
	if s := retryAfter(resp.Statuses, prepared); s > 0 {
		return []*corev3.HeaderValue{{Key: "Retry-After", Value: strconv.FormatInt(s, 10)}}
	}
	return nil
}

// degradedHeaders is RateLimit-Degraded: true when the failure policy
// decided a limit of any descriptor.
func degradedHeaders(_ *rlsv3.RateLimitResponse, prepared []*limited) []*corev3.HeaderValue {
	if degraded(prepared) {
		return []*corev3.HeaderValue{{Key: degradedHeader, Value: "true"}}
	}
	return nil
}

// degradedHeader marks a response the failure policy decided, at least in
// part, instead of the counter backend.
const degradedHeader = "RateLimit-Degraded"

// degraded reports whether the failure policy decided a limit of any
// descriptor of prepared.
func degraded(prepared []*limited) bool {
	for _, l := range prepared {
		if l == nil {
			continue
		}
		for i := range l.limits {
			if l.limits[i].degraded {
				return true
			}
		}
	}
	return false
}

// ietfHeaders builds RateLimit-Policy and RateLimit: one policy per limit of
// each descriptor with a current limit (unlimited ones and those no limit
// applies to have none), in request order and, within a descriptor with
// several limits, in configuration order. A policy is named by the limit's
// name, else by the descriptor's stats key as configured (without the
// domain or the values detailed_metric and value_to_metric add, so a policy
// keeps its name across requests), with "[k]" appended for the k-th limit
// (from 0) of a descriptor with several. A name that an earlier policy of
// the response took gets "#" and the descriptor's position (from 0)
// appended. q is requests_per_unit; w the window, unit × unit_multiplier
// (a token bucket: the time its refill takes to fill it, see
// ratelimitheader.Window); r the remaining; t the reset, or, for a limit
// over (of a descriptor not in shadow mode), the seconds until it would
// pass (as Retry-After).
func ietfHeaders(sts []*rlsv3.RateLimitResponse_DescriptorStatus, prepared []*limited) []*corev3.HeaderValue {
	var policies []ratelimitheader.Policy
	var limits []ratelimitheader.ServiceLimit
	taken := map[string]bool{}
	for i, st := range sts {
		l := prepared[i]
		if st.GetCurrentLimit() == nil || l == nil {
			continue
		}
		for k := range l.limits {
			ls := &l.limits[k]
			name := ls.limit.Name
			if name == "" {
				name = l.rollup
				if len(l.limits) > 1 {
					name += "[" + strconv.Itoa(k) + "]"
				}
			}
			if taken[name] {
				name += "#" + strconv.Itoa(i)
			}
			for taken[name] { // only names that end in #n themselves
				name += "#"
			}
			taken[name] = true

			var w int64
			switch {
			case ls.engine.Algorithm != "":
				w = ratelimitheader.Window(ls.engine)
			case ls.limit.WindowLength() > 0: // requests_per_unit 0: never decided by the engine
				w = ratelimitheader.Seconds(ls.limit.WindowLength())
			}
			reset := int64(ls.reset.Round(time.Second) / time.Second)
			if ls.over && !l.shadow {
				reset = ls.retrySeconds()
			}
			policies = append(policies, ratelimitheader.Policy{Name: name, Quota: int64(ls.limit.RequestsPerUnit), Window: w})
			limits = append(limits, ratelimitheader.ServiceLimit{Name: name, Remaining: ls.remaining, Reset: reset})
		}
	}
	if len(policies) == 0 {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: ratelimitheader.PolicyField, Value: ratelimitheader.FormatPolicy(policies...)},
		{Key: ratelimitheader.Field, Value: ratelimitheader.FormatServiceLimit(limits...)},
	}
}

// retryAfter is the Retry-After of an OVER_LIMIT response, in seconds: the
// request passes again once every descriptor not in quota mode that is over
// its limit passes, and, when every quota-mode descriptor is over (which
// alone fails the request, see finish), one of them does. A descriptor
// passes when every limit of it does: its status reports the limit over
// that passes last. 0 when no descriptor is over.
func retryAfter(sts []*rlsv3.RateLimitResponse_DescriptorStatus, prepared []*limited) int64 {
	var need, quotaMin int64
	quotas, quotasOver := 0, 0
	for i, st := range sts {
		l := prepared[i]
		if l == nil {
			continue
		}
		over := st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if l.quota {
			quotas++
			if over {
				quotasOver++
				if s := l.decisive().retrySeconds(); quotaMin == 0 || s < quotaMin {
					quotaMin = s
				}
			}
			continue
		}
		if over {
			need = max(need, l.decisive().retrySeconds())
		}
	}
	if quotas > 0 && quotasOver == quotas {
		need = max(need, quotaMin)
	}
	return need
}

// retrySeconds is how long until the same request passes ls, over its
// limit, in whole seconds rounded up, at least 1 (see passesIn).
func (ls *limitState) retrySeconds() int64 {
	return max(int64((ls.passesIn()+time.Second-1)/time.Second), 1)
}

// rateLimitHeaders builds the X-RateLimit-* set (RATE_LIMIT_HEADERS x or
// both) from the most restrictive limited status, as the reference service
// does; the other header sets add the rest (headerSets).
func rateLimitHeaders(sts []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var min *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range sts {
		if st.GetCurrentLimit() == nil {
			continue
		}
		if min == nil || st.GetLimitRemaining() < min.GetLimitRemaining() {
			min = st
		}
	}
	if min == nil {
		return nil
	}
	lim := strconv.FormatUint(uint64(min.GetCurrentLimit().GetRequestsPerUnit()), 10)
	w := descriptors.Unit(min.GetCurrentLimit().GetUnit()).Window()
	if m := min.GetCurrentLimit().GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		w *= time.Duration(m.GetValue())
	}
	if w > 0 {
		lim = fmt.Sprintf("%s, %s;w=%d", lim, lim, int64(w.Seconds()))
	}
	return []*corev3.HeaderValue{
		{Key: "X-RateLimit-Limit", Value: lim},
		{Key: "X-RateLimit-Remaining", Value: strconv.FormatUint(uint64(min.GetLimitRemaining()), 10)},
		{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(int64(min.GetDurationUntilReset().AsDuration().Seconds()), 10)},
	}
}
