package ratelimitsvc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// LimitHeaders names the three headers of the reference service's
// LIMIT_RESPONSE_HEADERS_ENABLED (LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER; by default RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset).
type LimitHeaders struct {
	Limit, Remaining, Reset string
}

// limitHeaders are the reference service's response headers: of the
// descriptor closest to its limit (the least remaining, among those with a
// limit), or of the last one over its limit that is not in quota mode, its
// requests_per_unit, its remaining and the seconds until its window
// resets. None when no descriptor had a limit.
func limitHeaders(names *LimitHeaders, sts []*rlsv3.RateLimitResponse_DescriptorStatus, prepared []*limited) []*corev3.HeaderValue {
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	for i, st := range sts {
		if st.GetCurrentLimit() != nil && (closest == nil || st.GetLimitRemaining() < closest.GetLimitRemaining()) {
			closest = st
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && (prepared[i] == nil || !prepared[i].quota) {
			closest = st
		}
	}
	if closest == nil || closest.GetCurrentLimit() == nil {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: names.Limit, Value: strconv.FormatUint(uint64(closest.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: names.Remaining, Value: strconv.FormatUint(uint64(closest.GetLimitRemaining()), 10)},
		{Key: names.Reset, Value: strconv.FormatInt(int64(closest.GetDurationUntilReset().AsDuration().Seconds()), 10)},
	}
}
