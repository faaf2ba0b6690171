package restapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
)

// limitHeaders is what the rate-limit headers of one decision say.
type limitHeaders struct {
	policy     string // the draft's policy name
	limit      algorithms.Limit
	remaining  int64
	resetAt    int64 // X-RateLimit-Reset: Unix seconds; 0 leaves it out
	reset      int64 // the draft's t: seconds; negative leaves it out
	retryAfter int64 // Retry-After, seconds, when rejected; else 0
}

// setLimitHeaders writes the header sets that sets chooses, and Retry-After
// whenever the request was rejected, whatever sets says:
//
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (Unix
//     seconds);
//   - the draft's RateLimit-Policy ("policy";q=limit;w=window) and RateLimit
//     ("policy";r=remaining;t=seconds), see package ratelimitheader.
//
// t is the reset when the request was allowed and Retry-After when it was
// rejected, so that Retry-After never points before the end of the
// effective window (the draft's server behavior).
func setLimitHeaders(h http.Header, sets ratelimitheader.Sets, l limitHeaders) {
	if sets.SendsX() {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(l.limit.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(l.remaining, 10))
		if l.resetAt > 0 {
			h.Set("X-RateLimit-Reset", strconv.FormatInt(l.resetAt, 10))
		}
	}
	if sets.SendsIETF() {
		reset := l.reset
		if l.retryAfter > 0 {
			reset = l.retryAfter
		}
		h.Set(ratelimitheader.PolicyField, ratelimitheader.FormatPolicy(ratelimitheader.Policy{
			Name: l.policy, Quota: l.limit.Limit, Window: ratelimitheader.Window(l.limit),
		}))
		h.Set(ratelimitheader.Field, ratelimitheader.FormatServiceLimit(ratelimitheader.ServiceLimit{
			Name: l.policy, Remaining: l.remaining, Reset: reset,
		}))
	}
	if l.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(l.retryAfter, 10))
	}
}

// policyName names the draft's policy of a /check: the rule's name when a
// rule decided, else the inline limit's algorithm, limit and window (the w
// the policy advertises), such as "fixed_window-100-60". Rule names are
// ASCII already (A-Z, a-z, 0-9, '_', '.', ':', '-').
func policyName(rule string, l algorithms.Limit) string {
	if rule != "" {
		return rule
	}
	return fmt.Sprintf("%s-%d-%d", l.Algorithm, l.Limit, ratelimitheader.Window(l))
}

// registerPolicy is the draft's policy name of the POST /register limit.
const registerPolicy = "register"

// ceilUnix returns t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
