package ratelimitsvc_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// headersCall is one request of a headers test and what it must answer.
type headersCall struct {
	descs   []*rlcommon.RateLimitDescriptor
	overall rlsv3.RateLimitResponse_Code
	want    [][2]string // response_headers_to_add, in order
}

// checkHeaders serves testdata/headers.yaml with opts (clock at t0, aligned
// to the hour), makes the calls in order and compares each response's
// overall code and response_headers_to_add exactly.
func checkHeaders(t *testing.T, opts ratelimitsvc.Options, calls ...headersCall) {
	t.Helper()
	opts.Limiter = algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }})
	opts.Descriptors = loadConfig(t, "testdata/headers.yaml")
	c, _ := serve(t, opts)
	for i, k := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "headers", Descriptors: k.descs})
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.GetOverallCode() != k.overall {
			t.Errorf("call %d: overall code %v, want %v", i, resp.GetOverallCode(), k.overall)
		}
		var want []*corev3.HeaderValue
		for _, h := range k.want {
			want = append(want, &corev3.HeaderValue{Key: h[0], Value: h[1]})
		}
		if diff := cmp.Diff(want, resp.GetResponseHeadersToAdd(), protocmp.Transform()); diff != "" {
			t.Errorf("call %d: response_headers_to_add (-want +got):\n%s", i, diff)
		}
	}
}

// TestResponseHeadersBoth: the default sets, both: X-RateLimit-* of the most
// restrictive descriptor, then one RateLimit-Policy and RateLimit member per
// limited descriptor (the unlimited and the unmatched have none), then
// Retry-After when over. At t0: windows end in 60 s; the token bucket (2,
// 0.001 per second) refills fully in 2000 s; gcra (2 per minute) moves 30 s
// per hit; the sliding window, rejected with 2 in the current window, lets
// one more pass in 90 s.
func TestResponseHeadersBoth(t *testing.T) {
	descs := []*rlcommon.RateLimitDescriptor{desc("generic_key", "api"), desc("bucket", "b"), desc("cell", "c"), desc("sliding", "s"), desc("vip", "v"), desc("nothing", "n")}
	const policy = `"generic_key_api";q=3;w=60, "bucket";q=2;w=2000, "cell";q=2;w=60, "sliding";q=2;w=60`
	checkHeaders(t, ratelimitsvc.Options{ResponseHeaders: true},
		headersCall{descs: descs, overall: OK, want: [][2]string{
			{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", "1000"},
			{"RateLimit-Policy", policy},
			{"RateLimit", `"generic_key_api";r=2;t=60, "bucket";r=1;t=1000, "cell";r=1;t=30, "sliding";r=1;t=60`},
		}},
		headersCall{descs: descs, overall: OK, want: [][2]string{
			{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "2000"},
			{"RateLimit-Policy", policy},
			{"RateLimit", `"generic_key_api";r=1;t=60, "bucket";r=0;t=2000, "cell";r=0;t=60, "sliding";r=0;t=60`},
		}},
		// Over: t of each descriptor over is when it would pass; the request
		// passes when all do. generic_key_api admitted it, but a refused
		// request consumes nothing: 1 is left.
		headersCall{descs: descs, overall: OVER, want: [][2]string{
			{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "2000"},
			{"RateLimit-Policy", policy},
			{"RateLimit", `"generic_key_api";r=1;t=60, "bucket";r=0;t=1000, "cell";r=0;t=30, "sliding";r=0;t=90`},
			{"Retry-After", "1000"},
		}},
		headersCall{descs: []*rlcommon.RateLimitDescriptor{desc("vip", "v"), desc("nothing", "n")}, overall: OK},
	)
}

// TestResponseHeadersIETF: only the draft's fields. Policy names: the
// limit's name (escaped as a structured-field String), else the stats key as
// configured; a name taken by an earlier descriptor gets "#" and the
// position. requests_per_unit 0 is q=0, over until its unit ends.
func TestResponseHeadersIETF(t *testing.T) {
	checkHeaders(t, ratelimitsvc.Options{ResponseHeaders: true, HeaderSets: ratelimitheader.IETF},
		headersCall{descs: []*rlcommon.RateLimitDescriptor{desc("banned", "z"), desc("user", "alice"), desc("path", "/a"), desc("path", "/b"), desc("vip", "v")},
			overall: OVER, want: [][2]string{
				{"RateLimit-Policy", `"banned";q=0;w=60, "per \"user\" \\ limit";q=1;w=1, "path";q=5;w=3600, "path#3";q=5;w=3600`},
				// The ban rejects the request: the others consume nothing.
				{"RateLimit", `"banned";r=0;t=60, "per \"user\" \\ limit";r=1;t=1, "path";r=5;t=3600, "path#3";r=5;t=3600`},
				{"Retry-After", "60"},
			}},
		headersCall{descs: []*rlcommon.RateLimitDescriptor{desc("vip", "v")}, overall: OK},
	)
}

// TestResponseHeadersX: only X-RateLimit-*, as before RATE_LIMIT_HEADERS,
// and Retry-After when over. Quota-mode descriptors fail the request only
// when all are over; it passes again when the first of them does.
func TestResponseHeadersX(t *testing.T) {
	quotas := []*rlcommon.RateLimitDescriptor{desc("quota", "minute"), desc("quota", "hour")}
	checkHeaders(t, ratelimitsvc.Options{ResponseHeaders: true, HeaderSets: ratelimitheader.X},
		headersCall{descs: quotas, overall: OK, want: [][2]string{
			{"X-RateLimit-Limit", "1, 1;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "60"},
		}},
		headersCall{descs: quotas, overall: OVER, want: [][2]string{
			{"X-RateLimit-Limit", "1, 1;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "60"},
			{"Retry-After", "60"},
		}},
		// A plain descriptor over fails the request whatever the quotas say.
		headersCall{descs: []*rlcommon.RateLimitDescriptor{desc("quota", "hour"), desc("banned", "z")}, overall: OVER, want: [][2]string{
			{"X-RateLimit-Limit", "1, 1;w=3600"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "3600"},
			{"Retry-After", "3600"},
		}},
	)
}

// TestResponseHeadersOff: without RATE_LIMIT_RESPONSE_HEADERS nothing is
// added, whichever sets; with global shadow mode nothing is refused, so
// there is no Retry-After.
func TestResponseHeadersOff(t *testing.T) {
	banned := []*rlcommon.RateLimitDescriptor{desc("banned", "z")}
	checkHeaders(t, ratelimitsvc.Options{HeaderSets: ratelimitheader.IETF}, headersCall{descs: banned, overall: OVER})
	checkHeaders(t, ratelimitsvc.Options{ResponseHeaders: true, ShadowMode: true, HeaderSets: ratelimitheader.IETF},
		headersCall{descs: banned, overall: OK, want: [][2]string{
			{"RateLimit-Policy", `"banned";q=0;w=60`}, {"RateLimit", `"banned";r=0;t=60`},
		}})
}
