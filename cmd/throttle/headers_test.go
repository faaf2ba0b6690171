package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestRateLimitHeadersSetting runs the binary with each RATE_LIMIT_HEADERS
// value and RATE_LIMIT_RESPONSE_HEADERS=true, and checks the headers of REST
// /check and of gRPC ShouldRateLimit. The limits are token buckets of 2
// tokens refilled at 0.5 per second, so the times do not depend on the
// clock: a full refill is w=4 s; one token taken is back in 2 s; three
// requests in a row leave the third rejected for 2 s (rounded up).
func TestRateLimitHeadersSetting(t *testing.T) {
	dir := t.TempDir()
	yaml := "domain: edge\ndescriptors:\n  - key: bucket\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, refill_rate: 0.5}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		policy = `"token_bucket-2-4";q=2;w=4`
		first  = `"token_bucket-2-4";r=1;t=2`
		empty  = `"token_bucket-2-4";r=0;t=4`
		over   = `"token_bucket-2-4";r=0;t=2`
	)
	for _, tt := range []struct {
		sets    string
		x, ietf bool
		grpc    [3][][2]string // response_headers_to_add of three calls
	}{
		{"x", true, false, [3][][2]string{
			{{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", "2"}},
			{{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "4"}},
			{{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "4"}, {"Retry-After", "2"}},
		}},
		{"ietf", false, true, [3][][2]string{
			{{"RateLimit-Policy", `"bucket";q=2;w=4`}, {"RateLimit", `"bucket";r=1;t=2`}},
			{{"RateLimit-Policy", `"bucket";q=2;w=4`}, {"RateLimit", `"bucket";r=0;t=4`}},
			{{"RateLimit-Policy", `"bucket";q=2;w=4`}, {"RateLimit", `"bucket";r=0;t=2`}, {"Retry-After", "2"}},
		}},
		{"both", true, true, [3][][2]string{
			{{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", "2"},
				{"RateLimit-Policy", `"bucket";q=2;w=4`}, {"RateLimit", `"bucket";r=1;t=2`}},
			{{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "4"},
				{"RateLimit-Policy", `"bucket";q=2;w=4`}, {"RateLimit", `"bucket";r=0;t=4`}},
			{{"X-RateLimit-Limit", "2, 2;w=60"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "4"},
				{"RateLimit-Policy", `"bucket";q=2;w=4`}, {"RateLimit", `"bucket";r=0;t=2`}, {"Retry-After", "2"}},
		}},
	} {
		t.Run(tt.sets, func(t *testing.T) {
			s := throttletest.Start(t, "RATE_LIMIT_HEADERS="+tt.sets, "RATE_LIMIT_RESPONSE_HEADERS=true", "DESCRIPTORS_DIR="+dir)

			code, h, reg := doJSON(t, "POST", s.URL+"/register", "", `{"name":"headers","email":"headers-`+tt.sets+`@example.com"}`)
			if code != 201 {
				t.Fatalf("register: %d %v", code, reg)
			}
			wantField(t, "register", h, "X-RateLimit-Limit", tt.x, "10")
			wantField(t, "register", h, "RateLimit-Policy", tt.ietf, `"register";q=10;w=3600`)
			if got := h.Get("RateLimit"); tt.ietf && !regexp.MustCompile(`^"register";r=9;t=[0-9]+$`).MatchString(got) {
				t.Errorf("register: RateLimit = %q, want r=9 and a t", got)
			}
			key, _ := reg["api_key"].(string)

			body := `{"identifier":"u","limit":2,"algorithm":"token_bucket","refill_rate":0.5}`
			for i, want := range []struct {
				remaining, ratelimit, retry string
			}{{"1", first, ""}, {"0", empty, ""}, {"0", over, "2"}} {
				before := time.Now().Unix()
				code, h, got := doJSON(t, "POST", s.URL+"/check", key, body)
				if code != 200 || got["allowed"] != (want.retry == "") {
					t.Fatalf("check %d: %d %v", i+1, code, got)
				}
				what := "check " + strconv.Itoa(i+1)
				wantField(t, what, h, "X-RateLimit-Limit", tt.x, "2")
				wantField(t, what, h, "X-RateLimit-Remaining", tt.x, want.remaining)
				wantField(t, what, h, "X-RateLimit-Algorithm", tt.x, "token_bucket")
				if reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); tt.x && (err != nil || reset < before || reset > time.Now().Unix()+5) {
					t.Errorf("%s: X-RateLimit-Reset = %q, want a Unix time within seconds", what, h.Get("X-RateLimit-Reset"))
				}
				wantField(t, what, h, "RateLimit-Policy", tt.ietf, policy)
				wantField(t, what, h, "RateLimit", tt.ietf, want.ratelimit)
				wantField(t, what, h, "Retry-After", want.retry != "", want.retry)
			}

			conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlsv3.NewRateLimitServiceClient(conn)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "bucket", Value: "b"}}}}}
			for i, hs := range tt.grpc {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := rls.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					t.Fatalf("ShouldRateLimit %d: %v", i+1, err)
				}
				var want []*corev3.HeaderValue
				for _, h := range hs {
					want = append(want, &corev3.HeaderValue{Key: h[0], Value: h[1]})
				}
				if diff := cmp.Diff(want, resp.GetResponseHeadersToAdd(), protocmp.Transform()); diff != "" {
					t.Errorf("ShouldRateLimit %d: response_headers_to_add (-want +got):\n%s", i+1, diff)
				}
			}
		})
	}
}

// wantField fails unless h has name with value when present is true, and
// lacks it otherwise.
func wantField(t *testing.T, what string, h http.Header, name string, present bool, value string) {
	t.Helper()
	got, ok := h[http.CanonicalHeaderKey(name)]
	switch {
	case !present && ok:
		t.Errorf("%s: %s = %q, want none", what, name, got)
	case present && (len(got) != 1 || got[0] != value):
		t.Errorf("%s: %s = %q, want %q", what, name, got, value)
	}
}
