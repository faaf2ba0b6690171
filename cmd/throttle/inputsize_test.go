package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestInputSizesAndMaxClients: through the built binary with its defaults, a gRPC
// request with a 512 KiB value or a YEAR limit override is refused
// INVALID_ARGUMENT naming the part (MAX_OVERRIDE_WINDOW, 720h); with
// MAX_CLIENTS=2, a third registration is 409 TOO_MANY_CLIENTS.
func TestInputSizesAndMaxClients(t *testing.T) {
	s := throttletest.Start(t, "MAX_CLIENTS=2")
	c := rlsDial(t, s.GRPCAddr)
	for _, tt := range []struct {
		d    *rlcommon.RateLimitDescriptor
		want string
	}{
		{&rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: strings.Repeat("v", 512<<10)}}},
			"descriptor 0 entry 0 value is 524288 bytes, longer than the 1024 allowed"},
		{&rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
			Limit: &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR}},
			"descriptor 0 limit override: a window of 365 days, longer than the 30 days allowed (MAX_OVERRIDE_WINDOW)"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{tt.d}})
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tt.want {
			t.Errorf("ShouldRateLimit: %v, want InvalidArgument %q", err, tt.want)
		}
	}
	for n := range 3 {
		code, _, body := doJSON(t, "POST", s.URL+"/register", "", fmt.Sprintf(`{"name": "c%d", "email": "c%d@example.com"}`, n, n))
		want := http.StatusCreated
		if n == 2 {
			want = http.StatusConflict
		}
		if code != want || (n == 2 && body["code"] != "TOO_MANY_CLIENTS") {
			t.Errorf("registration %d: %d %v, want %d", n+1, code, body, want)
		}
	}
}
