package main

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// Holds on quota expire: a killed replica's lease returns to the others
// within its TTL and a sync interval, and a decision Redis could not make
// in time (hung or stopped) is the failure policy's, never a refusal.

// TestApproximateKilledLeaseReturns: 3 replicas share a limit of 2,000 an
// hour, calls split 1 : 3 : 5 at 200 a second; the busiest replica is
// killed with kill -9 once 1,400 were admitted. Its lease goes back to the
// pool within a lease TTL, so the survivors admit the rest of the limit:
// 2,000 ± 1 % in the window, all told (before leases expired, 1,864).
func TestApproximateKilledLeaseReturns(t *testing.T) {
	srv := redistest.Start(t)
	servers, clients := approxReplicas(t, srv.URL(), 3, "APPROXIMATE_SYNC_INTERVAL=100ms")
	rdb := redistest.NewClient(t, srv.URL())
	hour := time.Now().Unix() / 3600
	if time.Until(time.Unix((hour+1)*3600, 0)) < time.Minute {
		time.Sleep(time.Until(time.Unix((hour+1)*3600, 0)) + time.Second) // one window for the whole test
		hour++
	}
	weights := []float64{1, 3, 5}
	var admitted [3]atomic.Int64
	var total, refusedAt atomic.Int64 // refusedAt: when the survivors last had a call admitted (Unix ns)
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	end := time.Now().Add(40 * time.Second)
	for i, c := range clients {
		wg.Add(1)
		go func(i int, c rlsv3.RateLimitServiceClient) {
			defer wg.Done()
			tick := time.Duration(float64(time.Second) * 9 / (200 * weights[i]))
			for next := time.Now(); time.Now().Before(end); next = next.Add(tick) {
				time.Sleep(time.Until(next))
				if i == 2 {
					select {
					case <-killed:
						return
					default:
					}
				} else if last := refusedAt.Load(); last != 0 && time.Since(time.Unix(0, last)) > 3*time.Second {
					return // nothing admitted for 3 s: the limit is spent
				}
				ok, err := approxCall(c, "killed", "k")
				if err != nil {
					if i == 2 {
						return
					}
					t.Errorf("replica %d: %v", i+1, err)
					return
				}
				if ok {
					admitted[i].Add(1)
					if i != 2 {
						refusedAt.Store(time.Now().UnixNano())
					}
					if total.Add(1) >= 1400 && i == 2 {
						once.Do(func() {
							if err := servers[2].Signal(syscall.SIGKILL); err != nil {
								t.Error(err)
							}
							close(killed)
						})
					}
				}
			}
		}(i, c)
	}
	wg.Wait()
	<-servers[2].Exited
	sum := admitted[0].Load() + admitted[1].Load() + admitted[2].Load()
	t.Logf("admitted %d (replicas %d, %d, %d — the third killed at 1,400 in all); Redis counts %d",
		sum, admitted[0].Load(), admitted[1].Load(), admitted[2].Load(), windowCount(t, []redis.UniversalClient{rdb}, hour))
	if sum < 1980 || sum > 2020 {
		t.Errorf("admitted %d in the window with a replica killed, want 2,000 ± 1 %%", sum)
	}
}

// TestApproximateHungRedisByPolicy: an approximate REST rule of 2,000 an
// hour with 1,970 left; Redis hung (CLIENT PAUSE 3 s) and then stopped.
// From the first spent lease on, every decision Redis could not make is
// FAILURE_MODE's (reason failure_policy, RateLimit-Degraded: true): open
// admits, closed refuses, local decides from memory; none is rate_limited,
// none waits for Redis to come back. When Redis is back, Redis counts
// exactly what was admitted within a lease or blind budget (within_limit):
// nothing twice.
func TestApproximateHungRedisByPolicy(t *testing.T) {
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			s := throttletest.Start(t, "REDIS_URL="+srv.URL(), "APPROXIMATE_SYNC_INTERVAL=100ms",
				"FAILURE_MODE="+mode, "CLAIMABLE_DOMAINS=hung-"+mode)
			key := s.RegisterDomain(t, "hung "+mode, "hung-"+mode, "")
			if code, _, rule := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"hourly","algorithm":"fixed_window","limit":2000,"window":3600,"accuracy":"approximate"}`); code != 201 {
				t.Fatalf("POST /rules = %d %v", code, rule)
			}
			rdb := redistest.NewClient(t, srv.URL())
			within := 0
			check := func(phase string) string {
				t.Helper()
				began := time.Now()
				code, h, got := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"u","rule":"hourly"}`)
				if took := time.Since(began); took > 2*time.Second {
					t.Errorf("%s: a check took %s: it waited for Redis", phase, took)
				}
				reason, _ := got["reason"].(string)
				switch reason {
				case "within_limit":
					within++
				case "failure_policy":
					if h.Get("RateLimit-Degraded") != "true" {
						t.Errorf("%s: failure_policy without RateLimit-Degraded: true", phase)
					}
					wantAllowed := mode != "closed"
					if code != 200 || got["allowed"] != wantAllowed {
						t.Errorf("%s: FAILURE_MODE=%s decided %d %v", phase, mode, code, got)
					}
				default:
					t.Errorf("%s: check = %d %v, want within_limit or failure_policy", phase, code, got)
				}
				return reason
			}
			for range 30 {
				check("before")
			}
			time.Sleep(300 * time.Millisecond) // synced: the lease follows a trickle
			policy := 0
			pause := func(phase string, d time.Duration) {
				for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
					if check(phase) == "failure_policy" {
						policy++
					}
				}
			}
			if err := rdb.ClientPause(context.Background(), 3*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			pause("hung", 2500*time.Millisecond)
			hung := policy
			// Redis answers again: once the replica is idle its lease is
			// back and Redis counts what was admitted within a lease or a
			// blind budget, once.
			var counted int64
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if counted, _ = ruleCount(t, rdb, ":u}:fw:n:rule:hourly@"); counted == int64(within) {
					break
				}
			}
			if counted != int64(within) {
				t.Errorf("after the pause Redis counts %d, want the %d admitted within a lease or blind budget", counted, within)
			}
			srv.Stop()
			pause("stopped", 1500*time.Millisecond)
			t.Logf("FAILURE_MODE=%s: %d within a lease or blind; by the policy %d while hung, %d while stopped; Redis counted %d", mode, within, hung, policy-hung, counted)
			if hung == 0 || policy == hung {
				t.Errorf("by the policy: %d while Redis was hung, %d while stopped; want some in each", hung, policy-hung)
			}
			if c := s.Metric(t, "throttle_approximate_blind_hits_total"); mode != "closed" && c < float64(policy) {
				t.Errorf("throttle_approximate_blind_hits_total = %v, want at least the %d admitted by the policy", c, policy)
			}
		})
	}
}

// TestApproximateLargeAskTakesNoShare: one request whose hits_addend is the
// whole limit (2,000 a minute, 2 replicas) is refused and leases nothing
// past its replica's share (before, it leased everything left to its
// replica for an interval, and the other replica's callers were refused
// meanwhile): decided exactly, it leaves the others their quota.
func TestApproximateLargeAskTakesNoShare(t *testing.T) {
	srv := redistest.Start(t)
	servers, clients := approxReplicas(t, srv.URL(), 2, "APPROXIMATE_SYNC_INTERVAL=100ms")
	for _, c := range clients { // both replicas know each other
		if got := callN(t, c, "user", "warm", 1); got != 1 {
			t.Fatal("warm-up refused")
		}
	}
	waitMetric(t, servers[0], "throttle_approximate_replicas", 2)
	waitMetric(t, servers[1], "throttle_approximate_replicas", 2)
	if got := callN(t, clients[1], "user", "big", 10); got != 10 {
		t.Fatalf("%d of 10 admitted", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := clients[0].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "approx", HitsAddend: 2000,
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "big"}}}}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits_addend 2,000 of a limit of 2,000 with 10 admitted: %v %v, want OVER_LIMIT", resp, err)
	}
	if leased := servers[0].Metric(t, "throttle_approximate_leased_hits"); leased > 1000 {
		t.Errorf("after one refused request of 2,000 hits its replica holds %v leased, want at most its share (1,000)", leased)
	}
	if got := callN(t, clients[1], "user", "big", 900); got != 900 {
		t.Errorf("the other replica right after: %d of 900 admitted (1,990 left), want all", got)
	}
}
