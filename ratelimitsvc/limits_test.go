package ratelimitsvc_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// testClock is a clock tests move by hand; it starts at t0.
type testClock struct{ ns atomic.Int64 }

func newClock() *testClock {
	c := &testClock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// eachStore runs f against the memory store and a real Redis, each on a
// clock of its own starting at t0, serving testdata/limits.yaml with opts.
func eachStore(t *testing.T, opts ratelimitsvc.Options, f func(t *testing.T, c rlsv3.RateLimitServiceClient, clock *testClock)) {
	t.Helper()
	eachServer(t, opts, func(t *testing.T, _ *ratelimitsvc.Server, c rlsv3.RateLimitServiceClient, clock *testClock) {
		f(t, c, clock)
	})
}

// eachServer is eachStore, also handing f the Server.
func eachServer(t *testing.T, opts ratelimitsvc.Options, f func(t *testing.T, s *ratelimitsvc.Server, c rlsv3.RateLimitServiceClient, clock *testClock)) {
	t.Helper()
	stores := map[string]func(now func() time.Time) algorithms.Store{
		"memory": func(now func() time.Time) algorithms.Store {
			return algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: now})
		},
		"redis": func(now func() time.Time) algorithms.Store {
			redisFlushDomains(t, "limits")
			return redisstore.New(redistest.NewClient(t, redistest.SharedURL(t)), redisstore.Options{Now: now})
		},
	}
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			o := opts
			o.Limiter = stores[name](clock.now)
			o.Descriptors = loadConfig(t, "testdata/limits.yaml")
			o.Now = clock.now
			s, c, _ := serveServer(t, o)
			f(t, s, c, clock)
		})
	}
}

func limits(ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "limits", Descriptors: ds}
}

// stMul is st with a unit_multiplier in the current limit.
func stMul(code rlsv3.RateLimitResponse_Code, rpu int, unit rlsv3.RateLimitResponse_RateLimit_Unit, mult uint32, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := st(code, rpu, unit, "", remaining, reset)
	s.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult)
	return s
}

// TestRejectedConsumesNothing is issue 17's example: with ip 100/minute and
// user 1/minute, four requests carrying both leave ip at 99 remaining: the
// three the user limit rejected consumed nothing from ip.
func TestRejectedConsumesNothing(t *testing.T) {
	eachStore(t, ratelimitsvc.Options{}, func(t *testing.T, c rlsv3.RateLimitServiceClient, _ *testClock) {
		both := limits(desc("ip", "10.0.0.1"), desc("user", "alice"))
		wantCodes(t, 0, ask(t, c, both), OK, st(OK, 100, MIN, "", 99, time.Minute), st(OK, 1, MIN, "", 0, time.Minute))
		for i := 1; i <= 3; i++ {
			wantCodes(t, i, ask(t, c, both), OVER, st(OK, 100, MIN, "", 99, time.Minute), st(OVER, 1, MIN, "", 0, time.Minute))
		}
		wantCodes(t, 4, ask(t, c, limits(desc("ip", "10.0.0.1"))), OK, st(OK, 100, MIN, "", 98, time.Minute))
		// A ban rejects without the engine: the others are only read.
		wantCodes(t, 5, ask(t, c, limits(desc("ip", "10.0.0.1"), desc("banned", "x"))), OVER,
			st(OK, 100, MIN, "", 98, time.Minute), st(OVER, 0, MIN, "", 0, time.Minute))
		wantCodes(t, 6, ask(t, c, limits(desc("ip", "10.0.0.1"))), OK, st(OK, 100, MIN, "", 97, time.Minute))
	})
}

// TestCountRejectedHits: COUNT_REJECTED_HITS keeps the reference service's
// counting: every hit of every descriptor counts, admitted or not.
func TestCountRejectedHits(t *testing.T) {
	eachStore(t, ratelimitsvc.Options{CountRejectedHits: true}, func(t *testing.T, c rlsv3.RateLimitServiceClient, _ *testClock) {
		both := limits(desc("ip", "10.0.0.1"), desc("user", "alice"))
		wantCodes(t, 0, ask(t, c, both), OK, st(OK, 100, MIN, "", 99, time.Minute), st(OK, 1, MIN, "", 0, time.Minute))
		for i := 1; i <= 3; i++ {
			wantCodes(t, i, ask(t, c, both), OVER, st(OK, 100, MIN, "", uint32(99-i), time.Minute), st(OVER, 1, MIN, "", 0, time.Minute))
		}
		// The user's own rejected hits counted too: it is still over after
		// a read, and a window later it is fresh.
		wantCodes(t, 4, ask(t, c, limits(withHits(desc("user", "alice"), 0))), OVER, st(OVER, 1, MIN, "", 0, time.Minute))
	})
}

// TestSeveralLimits: burst (3/second) and sustained (5/hour) on one
// descriptor. A request passes only when both admit it and, when one
// rejects it, the other does not count it; the status reports the limit
// that decided: the one over, else the one with the least remaining. The
// headers list both policies.
func TestSeveralLimits(t *testing.T) {
	eachStore(t, ratelimitsvc.Options{ResponseHeaders: true}, func(t *testing.T, c rlsv3.RateLimitServiceClient, clock *testClock) {
		burst := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
			return st(code, 3, SEC, "burst", rem, time.Second)
		}
		sustained := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
			return st(code, 5, HOUR, "sustained", rem, time.Hour-time.Second) // a second into the hour
		}
		user := limits(desc("user_id", "alice"))
		resp := ask(t, c, user)
		wantCodes(t, 0, resp, OK, burst(OK, 2))
		wantHeaders(t, 0, resp, [][2]string{
			{"X-RateLimit-Limit", "3, 3;w=1"}, {"X-RateLimit-Remaining", "2"}, {"X-RateLimit-Reset", "1"},
			{"RateLimit-Policy", `"burst";q=3;w=1, "sustained";q=5;w=3600`},
			{"RateLimit", `"burst";r=2;t=1, "sustained";r=4;t=3600`},
		})
		wantCodes(t, 1, ask(t, c, user), OK, burst(OK, 1))
		wantCodes(t, 2, ask(t, c, user), OK, burst(OK, 0))
		resp = ask(t, c, user)
		wantCodes(t, 3, resp, OVER, burst(OVER, 0))
		// Sustained did not count the rejected request: 2 left, not 1.
		wantHeaders(t, 3, resp, [][2]string{
			{"X-RateLimit-Limit", "3, 3;w=1"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "1"},
			{"RateLimit-Policy", `"burst";q=3;w=1, "sustained";q=5;w=3600`},
			{"RateLimit", `"burst";r=0;t=1, "sustained";r=2;t=3600`},
			{"Retry-After", "1"},
		})
		clock.advance(time.Second)
		wantCodes(t, 4, ask(t, c, user), OK, sustained(OK, 1))
		wantCodes(t, 5, ask(t, c, user), OK, sustained(OK, 0))
		resp = ask(t, c, user)
		wantCodes(t, 6, resp, OVER, sustained(OVER, 0))
		wantHeaders(t, 6, resp, [][2]string{
			{"X-RateLimit-Limit", "5, 5;w=3600"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "3599"},
			{"RateLimit-Policy", `"burst";q=3;w=1, "sustained";q=5;w=3600`},
			{"RateLimit", `"burst";r=1;t=1, "sustained";r=0;t=3599`},
			{"Retry-After", "3599"},
		})
		// Unnamed limits are told apart by their position.
		resp = ask(t, c, limits(desc("unnamed", "u")))
		wantHeaders(t, 7, resp, [][2]string{
			{"X-RateLimit-Limit", "2, 2;w=1"}, {"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", "1"},
			{"RateLimit-Policy", `"unnamed[0]";q=2;w=1, "unnamed[1]";q=3;w=60`},
			{"RateLimit", `"unnamed[0]";r=1;t=1, "unnamed[1]";r=2;t=59`},
		})
	})
}

// TestSeveralLimitsMetrics: a descriptor with several limits counts its
// hits once in the per-descriptor metrics.
func TestSeveralLimitsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/limits.yaml"), Registerer: reg})
	for range 4 {
		ask(t, c, limits(desc("user_id", "bob")))
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"throttle_ratelimit_hits_total", 4},
		{"throttle_ratelimit_within_limit_total", 3},
		{"throttle_ratelimit_over_limit_total", 1},
	} {
		if got := counter(t, reg, tc.name, map[string]string{"domain": "limits", "key": "user_id"}); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnitMultiplier: a 5-minute window, from the YAML and from a request's
// limit override; current_limit carries the multiplier and w= is the whole
// window.
func TestUnitMultiplier(t *testing.T) {
	eachStore(t, ratelimitsvc.Options{ResponseHeaders: true}, func(t *testing.T, c rlsv3.RateLimitServiceClient, clock *testClock) {
		fiveMin := 5*time.Minute - t0Offset(5*time.Minute)
		report := limits(desc("report", "weekly"))
		resp := ask(t, c, report)
		wantCodes(t, 0, resp, OK, stMul(OK, 2, MIN, 5, 1, fiveMin))
		wantHeaders(t, 0, resp, [][2]string{
			{"X-RateLimit-Limit", "2, 2;w=300"}, {"X-RateLimit-Remaining", "1"}, {"X-RateLimit-Reset", secs(fiveMin)},
			{"RateLimit-Policy", `"report";q=2;w=300`},
			{"RateLimit", `"report";r=1;t=` + secs(fiveMin)},
		})
		wantCodes(t, 1, ask(t, c, report), OK, stMul(OK, 2, MIN, 5, 0, fiveMin))
		clock.advance(time.Minute) // still the same 5-minute window
		wantCodes(t, 2, ask(t, c, report), OVER, stMul(OVER, 2, MIN, 5, 0, fiveMin-time.Minute))
		clock.advance(fiveMin - time.Minute)
		wantCodes(t, 3, ask(t, c, report), OK, stMul(OK, 2, MIN, 5, 1, 5*time.Minute))

		// An override of 1 per 3 days.
		threeDays := 72*time.Hour - time.Duration(clock.now().UnixNano())%(72*time.Hour)
		o := withOverride(desc("ip", "10.9.9.9"), 1, typev3.RateLimitUnit_DAY)
		o.Limit.UnitMultiplier = wrapperspb.UInt32(3)
		resp = ask(t, c, limits(o))
		wantCodes(t, 4, resp, OK, stMul(OK, 1, rlsv3.RateLimitResponse_RateLimit_DAY, 3, 0, threeDays.Round(time.Second)))
		wantHeaders(t, 4, resp, [][2]string{
			{"X-RateLimit-Limit", "1, 1;w=259200"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", secs(threeDays)},
			{"RateLimit-Policy", `"ip";q=1;w=259200`},
			{"RateLimit", `"ip";r=0;t=` + secs(threeDays)},
		})
		clock.advance(24 * time.Hour)
		if threeDays > 24*time.Hour {
			wantCodes(t, 5, ask(t, c, limits(o)), OVER, stMul(OVER, 1, rlsv3.RateLimitResponse_RateLimit_DAY, 3, 0, (threeDays-24*time.Hour).Round(time.Second)))
		}
		// An override whose window is longer than the engine keeps.
		o.Limit.UnitMultiplier = wrapperspb.UInt32(400)
		_, err := c.ShouldRateLimit(context.Background(), limits(o))
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "descriptor 0 limit override: a window of 400 days, longer than the 30 days allowed (MAX_OVERRIDE_WINDOW)" {
			t.Errorf("override of 400 days: %v, want InvalidArgument naming the window", err)
		}
	})
}

// TestAlwaysCount: costs reported after the response (Envoy's
// apply_on_stream_done, tokens in hits_addend). Request-time checks carry
// hits_addend 0; the charge after the response is counted even when it is
// more than what is left, and the next request is refused until the window
// (or the bucket's refill) pays the debt back.
func TestAlwaysCount(t *testing.T) {
	eachStore(t, ratelimitsvc.Options{}, func(t *testing.T, c rlsv3.RateLimitServiceClient, clock *testClock) {
		check := limits(withHits(desc("tokens", "acme"), 0))
		charge := func(n uint64) *rlsv3.RateLimitRequest { return limits(withHits(desc("tokens", "acme"), n)) }
		wantCodes(t, 0, ask(t, c, check), OK, st(OK, 300, MIN, "", 300, time.Minute))
		wantCodes(t, 1, ask(t, c, charge(200)), OK, st(OK, 300, MIN, "", 100, time.Minute))
		wantCodes(t, 2, ask(t, c, check), OK, st(OK, 300, MIN, "", 100, time.Minute))
		// 500 with 100 left: over, and charged all the same (Envoy ignores
		// the answer to a charge).
		wantCodes(t, 3, ask(t, c, charge(500)), OVER, st(OVER, 300, MIN, "", 0, time.Minute))
		wantCodes(t, 4, ask(t, c, check), OVER, st(OVER, 300, MIN, "", 0, time.Minute))
		wantCodes(t, 5, ask(t, c, charge(1)), OVER, st(OVER, 300, MIN, "", 0, time.Minute))
		clock.advance(time.Minute)
		wantCodes(t, 6, ask(t, c, check), OK, st(OK, 300, MIN, "", 300, time.Minute))

		// A charge rides along a request another descriptor rejects: it is
		// counted anyway; it does not make the other count.
		wantCodes(t, 7, ask(t, c, limits(desc("user", "carol"))), OK, st(OK, 1, MIN, "", 0, time.Minute))
		wantCodes(t, 8, ask(t, c, limits(desc("user", "carol"), withHits(desc("tokens", "acme"), 50))), OVER,
			st(OVER, 1, MIN, "", 0, time.Minute), st(OK, 300, MIN, "", 250, time.Minute))
		// Its own rejection voids the others of the request.
		wantCodes(t, 9, ask(t, c, limits(desc("ip", "10.1.1.1"), withHits(desc("tokens", "acme"), 400))), OVER,
			st(OK, 100, MIN, "", 100, time.Minute), st(OVER, 300, MIN, "", 0, time.Minute))
		wantCodes(t, 10, ask(t, c, limits(desc("ip", "10.1.1.1"))), OK, st(OK, 100, MIN, "", 99, time.Minute))

		// A token bucket of 300 refilled at 5 per second: 700 charged
		// leaves it 400 in debt, paid back in 80 s.
		bcheck := limits(withHits(desc("bucket_tokens", "acme"), 0))
		wantCodes(t, 11, ask(t, c, limits(withHits(desc("bucket_tokens", "acme"), 200))), OK, st(OK, 300, MIN, "", 100, 40*time.Second))
		if resp := ask(t, c, limits(withHits(desc("bucket_tokens", "acme"), 500))); resp.GetOverallCode() != OVER {
			t.Fatalf("charge of 500 with 100 left: %v, want OVER_LIMIT", resp)
		}
		clock.advance(79 * time.Second)
		if resp := ask(t, c, bcheck); resp.GetOverallCode() != OVER {
			t.Errorf("79 s after going 400 into debt at 5/s: %v, want OVER_LIMIT", resp)
		}
		clock.advance(2 * time.Second)
		if resp := ask(t, c, bcheck); resp.GetOverallCode() != OK || resp.GetStatuses()[0].GetLimitRemaining() != 5 {
			t.Errorf("81 s after going 400 into debt at 5/s: %v, want OK with 5 left", resp)
		}
	})
}

// TestShadowModeNotGrouped: a shadow-mode descriptor is decided and counted
// on its own: over, it does not void the others; another's rejection does
// not keep it from counting.
func TestShadowModeNotGrouped(t *testing.T) {
	eachStore(t, ratelimitsvc.Options{}, func(t *testing.T, c rlsv3.RateLimitServiceClient, _ *testClock) {
		wantCodes(t, 0, ask(t, c, limits(desc("shadow", "s1"))), OK, st(OK, 1, MIN, "", 0, time.Minute))
		wantCodes(t, 1, ask(t, c, limits(desc("shadow", "s1"), desc("ip", "10.2.2.2"))), OK,
			st(OK, 1, MIN, "", 0, time.Minute), st(OK, 100, MIN, "", 99, time.Minute))
		wantCodes(t, 2, ask(t, c, limits(desc("user", "dave"))), OK, st(OK, 1, MIN, "", 0, time.Minute))
		wantCodes(t, 3, ask(t, c, limits(desc("user", "dave"), desc("shadow", "s2"))), OVER,
			st(OVER, 1, MIN, "", 0, time.Minute), st(OK, 1, MIN, "", 0, time.Minute))
		// s2 counted during the rejected request: now over (shadow: OK).
		resp := ask(t, c, limits(desc("shadow", "s2")))
		wantCodes(t, 4, resp, OK, st(OK, 1, MIN, "", 0, time.Minute))
	})
}

// wantHeaders compares a response's response_headers_to_add exactly.
func wantHeaders(t *testing.T, i int, resp *rlsv3.RateLimitResponse, want [][2]string) {
	t.Helper()
	var hs []*corev3.HeaderValue
	for _, h := range want {
		hs = append(hs, &corev3.HeaderValue{Key: h[0], Value: h[1]})
	}
	if diff := cmp.Diff(hs, resp.GetResponseHeadersToAdd(), protocmp.Transform()); diff != "" {
		t.Errorf("call %d: response_headers_to_add (-want +got):\n%s", i, diff)
	}
}

// secs is d in whole seconds, as the headers write a reset.
func secs(d time.Duration) string {
	return strconv.FormatInt(int64(d.Round(time.Second)/time.Second), 10)
}
