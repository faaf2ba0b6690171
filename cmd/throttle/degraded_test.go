package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestDegradedMarkerOnGRPC: with Redis stopped and FAILURE_MODE=open, what
// Envoy gets from ShouldRateLimit says the failure policy decided — the
// header RateLimit-Degraded: true among response_headers_to_add (with
// RATE_LIMIT_RESPONSE_HEADERS) and degraded: true in dynamic_metadata (with
// RESPONSE_DYNAMIC_METADATA) — while with Redis up neither is there; and a
// server with neither setting adds nothing to what Envoy sends its clients.
func TestDegradedMarkerOnGRPC(t *testing.T) {
	dir := t.TempDir()
	yaml := "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	env := []string{"REDIS_URL=" + srv.URL(), "FAILURE_MODE=open", "DESCRIPTORS_DIR=" + dir, "RATE_LIMIT_HEADERS=ietf"}
	marked := throttletest.Start(t, append(env, "RATE_LIMIT_RESPONSE_HEADERS=true", "RESPONSE_DYNAMIC_METADATA=true")...)
	plain := throttletest.Start(t, env...)
	call := func(s *throttletest.Server, user string) *rlsv3.RateLimitResponse {
		t.Helper()
		conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}
	// The headers as key: value, the clock's reset (t=…) cut off.
	headers := func(hs []*corev3.HeaderValue) []string {
		var out []string
		for _, h := range hs {
			v, _, _ := strings.Cut(h.GetValue(), ";t=")
			out = append(out, h.GetKey()+": "+v)
		}
		return out
	}
	want := func(degraded bool) []string {
		hs := []string{`RateLimit-Policy: "user";q=5;w=3600`, `RateLimit: "user";r=4`}
		if degraded {
			hs = append(hs, "RateLimit-Degraded: true")
		}
		return hs
	}
	check := func(what string, resp *rlsv3.RateLimitResponse, degraded bool) {
		t.Helper()
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("%s: %v, want OK", what, resp.GetOverallCode())
		}
		if diff := cmp.Diff(want(degraded), headers(resp.GetResponseHeadersToAdd())); diff != "" {
			t.Errorf("%s: response_headers_to_add (-want +got):\n%s", what, diff)
		}
		md, ok := resp.GetDynamicMetadata().GetFields()["degraded"]
		if ok != degraded || (ok && !cmp.Equal(md, structpb.NewBoolValue(true), protocmp.Transform())) {
			t.Errorf("%s: dynamic_metadata %v, want degraded: true only when degraded (%v)", what, resp.GetDynamicMetadata(), degraded)
		}
	}

	check("Redis up", call(marked, "alice"), false)
	if resp := call(plain, "bob"); resp.GetResponseHeadersToAdd() != nil || resp.GetDynamicMetadata() != nil {
		t.Errorf("Redis up, no settings: headers %v, metadata %v; want none", resp.GetResponseHeadersToAdd(), resp.GetDynamicMetadata())
	}

	srv.Stop()
	// FAILURE_MODE=open: allowed, remaining the limit minus the hits.
	for range 3 {
		check("Redis stopped", call(marked, "alice"), true)
		if resp := call(plain, "bob"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetResponseHeadersToAdd() != nil || resp.GetDynamicMetadata() != nil {
			t.Errorf("Redis stopped, no settings: %v, headers %v, metadata %v; want OK and nothing added", resp.GetOverallCode(), resp.GetResponseHeadersToAdd(), resp.GetDynamicMetadata())
		}
	}
	for _, s := range []*throttletest.Server{marked, plain} {
		if got := s.Metric(t, "throttle_degraded_decisions_total"); got != 3 {
			t.Errorf("throttle_degraded_decisions_total = %v, want 3", got)
		}
	}
}
