package ratelimitsvc_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/store"
)

// TestFailureModes stops Redis mid-test and starts it again, for each
// FAILURE_MODE, through the real gRPC service.
func TestFailureModes(t *testing.T) {
	cases := []struct {
		mode algorithms.FailureMode
		down []rlsv3.RateLimitResponse_Code // path 5/hour: six calls while Redis is down
	}{
		{algorithms.FailOpen, []rlsv3.RateLimitResponse_Code{OK, OK, OK, OK, OK, OK}},
		{algorithms.FailClosed, []rlsv3.RateLimitResponse_Code{OVER, OVER, OVER, OVER, OVER, OVER}},
		// Local counters: 5/hour enforced by this replica alone; the
		// two hits made on Redis before it died are not known locally.
		{algorithms.FailLocal, []rlsv3.RateLimitResponse_Code{OK, OK, OK, OK, OK, OVER}},
	}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			srv := redistest.Start(t)
			g, err := redisstore.NewGuard(redisstore.New(redistest.NewClient(t, srv.URL()), redisstore.Options{}),
				redisstore.GuardOptions{Mode: tc.mode, Timeout: 200 * time.Millisecond, BreakerMinCalls: 1, OpenFor: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := serve(t, ratelimitsvc.Options{Limiter: g, Descriptors: loadConfig(t, "testdata/test.yaml"),
				ResponseHeaders: true, DynamicMetadata: true})
			// The failure policy's answers say so: the header
			// RateLimit-Degraded and the metadata's degraded.
			var degraded bool
			code := func() rlsv3.RateLimitResponse_Code {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("path", "/fm")}})
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				header := slices.ContainsFunc(resp.GetResponseHeadersToAdd(), func(h *corev3.HeaderValue) bool {
					return h.GetKey() == "RateLimit-Degraded" && h.GetValue() == "true"
				})
				md, inMetadata := resp.GetDynamicMetadata().GetFields()["degraded"]
				if header != inMetadata || (inMetadata && !md.GetBoolValue()) {
					t.Errorf("header RateLimit-Degraded: %v, metadata degraded: %v; want both or neither", header, md)
				}
				degraded = header
				return resp.GetOverallCode()
			}
			for i := range 2 {
				if got := code(); got != OK || degraded {
					t.Fatalf("Redis up, call %d: %v degraded=%v, want OK, not degraded", i, got, degraded)
				}
			}
			srv.Stop()
			for i, want := range tc.down {
				if got := code(); got != want || !degraded {
					t.Errorf("Redis down, call %d: %v degraded=%v, want %v, degraded", i, got, degraded, want)
				}
			}
			srv.Restart()
			deadline := time.Now().Add(5 * time.Second)
			for code() != OK || g.Degraded() || degraded { // calls probe the open circuit
				if time.Now().After(deadline) {
					t.Fatal("service did not recover within 5s of Redis's return")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestRESTRuleDomains: a client's rules with descriptors answer Envoy
// requests for the client's domain, and a new rule is live without restart.
func TestRESTRuleDomains(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	client, err := db.CreateClient(ctx, store.Client{Name: "Shop Front", Email: "ops@shop.example", Domain: "shop-front"}, [32]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	if client.Domain != "shop-front" {
		t.Fatalf("domain = %q, want shop-front", client.Domain)
	}
	if _, err := db.CreateRule(ctx, store.Rule{ClientID: client.ID, Name: "per_user", Limit: algorithms.Limit{Algorithm: "fixed_window", Limit: 2, Window: time.Minute},
		Descriptors: []store.DescriptorEntry{{Key: "generic_key", Value: "api"}, {Key: "user_id"}}}); err != nil {
		t.Fatal(err)
	}
	cache := store.NewCache(db, time.Hour, quietLog())
	if err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}), Rules: cache})

	user := call{domain: "shop-front", descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u1")}}
	for i, want := range []*rlsv3.RateLimitResponse_DescriptorStatus{
		st(OK, 2, MIN, "per_user", 1, time.Minute),
		st(OK, 2, MIN, "per_user", 0, time.Minute),
		st(OVER, 2, MIN, "per_user", 0, time.Minute),
	} {
		user.want = []*rlsv3.RateLimitResponse_DescriptorStatus{want}
		mustCall(t, c, i, user)
	}
	other := call{domain: "shop-front", descs: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}}
	mustCall(t, c, 3, other)

	// A new rule, with a 90 s window (90 seconds to Envoy), live at once.
	if _, err := db.CreateRule(ctx, store.Rule{ClientID: client.ID, Name: "per_ip", Limit: algorithms.Limit{Algorithm: "token_bucket", Limit: 1, Window: 90 * time.Second},
		Descriptors: []store.DescriptorEntry{{Key: "remote_address"}}}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	other.want = []*rlsv3.RateLimitResponse_DescriptorStatus{stMulName(OK, 1, SEC, 90, "per_ip", 0, 90*time.Second)}
	mustCall(t, c, 4, other)
	other.want = []*rlsv3.RateLimitResponse_DescriptorStatus{stMulName(OVER, 1, SEC, 90, "per_ip", 0, 90*time.Second)}
	mustCall(t, c, 5, other)

	// A rule of two limits: named by the rule and their position unless
	// named; 600 s is 10 minutes to Envoy.
	if _, err := db.CreateRule(ctx, store.Rule{ClientID: client.ID, Name: "search", Descriptors: []store.DescriptorEntry{{Key: "path", Value: "/search"}},
		RateLimits: []store.RuleLimit{{Limit: algorithms.Limit{Algorithm: "fixed_window", Limit: 2, Window: time.Second}},
			{Name: "ten_minutes", Limit: algorithms.Limit{Algorithm: "fixed_window", Limit: 3, Window: 10 * time.Minute}}}}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	search := call{domain: "shop-front", descs: []*rlcommon.RateLimitDescriptor{desc("path", "/search")}}
	for i, want := range []*rlsv3.RateLimitResponse_DescriptorStatus{
		st(OK, 2, SEC, "search[0]", 1, time.Second),
		st(OK, 2, SEC, "search[0]", 0, time.Second),
		st(OVER, 2, SEC, "search[0]", 0, time.Second),
	} {
		search.want = []*rlsv3.RateLimitResponse_DescriptorStatus{want}
		mustCall(t, c, 6+i, search)
	}
}

// stMulName is st with a unit_multiplier.
func stMulName(code rlsv3.RateLimitResponse_Code, rpu int, unit rlsv3.RateLimitResponse_RateLimit_Unit, mult uint32, name string, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := stMul(code, rpu, unit, mult, remaining, reset)
	s.CurrentLimit.Name = name
	return s
}
