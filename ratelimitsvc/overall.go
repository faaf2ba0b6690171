package ratelimitsvc

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// finish sets what follows from the descriptors' statuses, as the reference
// service's shouldRateLimitWorker does: the overall code, global shadow
// mode, the rate-limit headers and the dynamic metadata. prepared holds, per
// descriptor, the limit that applied to it, or nil.
//
// The overall code is OVER_LIMIT when a descriptor not in quota mode is over
// its limit, or when there are quota-mode descriptors and every one of them
// is over. A quota-mode descriptor over its limit alone keeps its own
// OVER_LIMIT status but does not fail the request: a quota is a soft limit,
// reported to the caller (in the statuses, and in the dynamic metadata by
// which descriptors passed) so it can fall back to another backend. A
// shadow-mode descriptor never counts as over.
func (s *Server) finish(ctx context.Context, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, prepared []*limited) {
	denied, quotas, quotasOver := false, 0, 0
	for i, st := range resp.Statuses {
		over := st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if l := prepared[i]; l != nil && l.quota {
			quotas++
			if over {
				quotasOver++
			}
			continue
		}
		denied = denied || over
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if denied || (quotas > 0 && quotasOver == quotas) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.opts.ShadowMode {
		// Global shadow mode: the statuses stay as decided, the answer is OK.
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		s.metrics.shadowed()
	}
	resp.ResponseHeadersToAdd = responseHeaders(s.headers, resp, prepared)
	if s.opts.DynamicMetadata {
		md, err := dynamicMetadata(req, resp.Statuses, prepared)
		if err != nil {
			// Metadata is checked when loaded; this is a bug, not the caller's.
			s.opts.Log.ErrorContext(ctx, "descriptor metadata not returned", "domain", req.GetDomain(), "err", err)
		}
		resp.DynamicMetadata = md
	}
}

// configPending refuses a request while the YAML configuration has not loaded
// yet (FORCE_START_WITHOUT_INITIAL_CONFIG), unless a REST client owns the
// domain: the reference service answers "no rate limit configuration
// loaded" until its first configuration, and Envoy applies its
// failure_mode_deny.
func (s *Server) configPending(domain string) error {
	if s.opts.Descriptors == nil || s.opts.Descriptors() != nil {
		return nil
	}
	if s.opts.Rules != nil {
		if _, ok := s.opts.Rules.ClientByDomain(domain); ok {
			return nil
		}
	}
	return status.Error(codes.Unavailable, "no rate limit configuration loaded")
}
