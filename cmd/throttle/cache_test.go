package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestOverLimitCacheEndToEnd: with the default LOCAL_CACHE_SIZE_IN_BYTES, a
// descriptor Redis rejected is rejected from the cache for the rest of its
// window — the same answers as with the cache off, fewer Redis calls.
func TestOverLimitCacheEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      []string
		wantHits float64
	}{
		{"default on", nil, 14},
		{"off", []string{"LOCAL_CACHE_SIZE_IN_BYTES=0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 1, tc.env...)
			req := &rlsv3.RateLimitRequest{Domain: "overload", Descriptors: []*rlcommon.RateLimitDescriptor{{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "fixed_window", Value: "hot-" + strconv.FormatInt(time.Now().UnixNano(), 36)}},
				Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR},
			}}}
			client := rlsv3.NewRateLimitServiceClient(c.conns[0])
			for i := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := client.ShouldRateLimit(ctx, req)
				cancel()
				want := rlsv3.RateLimitResponse_OK
				if i >= 5 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if err != nil || resp.GetOverallCode() != want {
					t.Fatalf("call %d: %v %v, want %v", i, resp.GetOverallCode(), err, want)
				}
				if st := resp.GetStatuses()[0]; i >= 5 && (st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() <= 0) {
					t.Errorf("call %d: status %v, want 0 remaining and a reset time", i, st)
				}
			}
			r := c.replicas[0]
			if got := r.Metric(t, "throttle_overlimit_cache_hits_total"); got != tc.wantHits {
				t.Errorf("throttle_overlimit_cache_hits_total = %v, want %v (the 6th call goes to Redis, the 14 after it do not)", got, tc.wantHits)
			}
			if got := r.Metric(t, "throttle_ratelimit_over_limit_with_local_cache_total"); got != tc.wantHits {
				t.Errorf("over_limit_with_local_cache = %v, want %v", got, tc.wantHits)
			}
			if got := r.Metric(t, "throttle_ratelimit_over_limit_total"); got != 15 {
				t.Errorf("over_limit = %v, want 15", got)
			}
		})
	}
}
