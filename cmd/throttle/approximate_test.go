package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// Approximate limits through the built binary: replicas on a real Redis
// (and a Redis Cluster) keep one limit within 1 % on uneven traffic, Redis
// stopped and started again loses no admitted hit, a replica killed
// with kill -9 loses none (its unspent lease lapses with the window), and
// a key below its limit is never refused, however fast its hits come.
// approxband_test.go measures the band at every rate.

const approxDescriptors = `domain: approx
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2000, accuracy: approximate}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2000, algorithm: sliding_window, accuracy: approximate}
  - key: down
    rate_limit: {unit: hour, requests_per_unit: 6400, accuracy: approximate}
  - key: short
    rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 5120, accuracy: approximate}
  - key: mid
    rate_limit: {unit: hour, requests_per_unit: 100000, accuracy: approximate}
  - key: band
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, accuracy: approximate}
  - key: killed
    rate_limit: {unit: hour, requests_per_unit: 2000, accuracy: approximate}
  - key: band_sliding
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: sliding_window, accuracy: approximate}
`

// A window no answer has covered has a blind budget of limit / (128 ×
// replicas) once the replica count has settled (an interval after a
// replica joined): down's is 50 (of 6,400), short's 40 (of 5,120). It is
// sent to Redis once half of that is pending; past it, Redis is asked for
// a lease.

// approxReplicas starts n replicas of the binary on redisURL with the
// approx domain, and a gRPC client of each.
func approxReplicas(t *testing.T, redisURL string, n int, env ...string) ([]*throttletest.Server, []rlsv3.RateLimitServiceClient) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "approx.yaml"), []byte(approxDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	env = append([]string{"REDIS_URL=" + redisURL, "DESCRIPTORS_DIR=" + dir}, env...)
	var servers []*throttletest.Server
	var clients []rlsv3.RateLimitServiceClient
	for range n {
		s := throttletest.Start(t, env...)
		conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		servers, clients = append(servers, s), append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	return servers, clients
}

// approxCall asks for one hit of key=value in the approx domain and reports
// whether it was admitted.
func approxCall(c rlsv3.RateLimitServiceClient, key, value string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "approx", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}})
	if err != nil {
		return false, err
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
}

// offer sends rate calls a second of key=value, split over the clients by
// weights, until end, and returns how many each client got admitted.
func offer(t *testing.T, clients []rlsv3.RateLimitServiceClient, weights []int, key, value string, rate float64, end time.Time) []int64 {
	t.Helper()
	admitted, _ := offerTo(t, grpcCallers(clients, key, value), weights, rate, end)
	return admitted
}

// windowCount sums the Redis counters of window number num on every master
// (not the leases' hashes, whose keys end in ":l").
func windowCount(t *testing.T, masters []redis.UniversalClient, num int64) int64 {
	t.Helper()
	return prefixCount(t, masters, "", num)
}

// prefixCount sums the Redis counters of window number num on every master
// whose keys start with prefix (CACHE_KEY_PREFIX).
func prefixCount(t *testing.T, masters []redis.UniversalClient, prefix string, num int64) int64 {
	t.Helper()
	suffix := ":" + strconv.FormatInt(num, 10)
	var sum int64
	for _, m := range masters {
		keys, err := m.Keys(context.Background(), prefix+"*"+suffix).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, suffix) {
				continue
			}
			n, err := m.Get(context.Background(), k).Int64()
			if err != nil {
				t.Fatal(err)
			}
			sum += n
		}
	}
	return sum
}

// TestApproximateWithinOnePercent: one key at 2,000 per minute, offered
// about six times that, unevenly over the replicas (1 : 3 : 5), admits
// within 1 % of 2,000 in the window: 3 replicas on one Redis, 1 replica,
// and 3 replicas on a Redis Cluster, at once (one window for all three).
// Every admitted hit is in Redis afterwards.
func TestApproximateWithinOnePercent(t *testing.T) {
	type setup struct {
		name    string
		weights []int
		url     func(t *testing.T) (string, []redis.UniversalClient)
		key     string
	}
	single := func(t *testing.T) (string, []redis.UniversalClient) {
		srv := redistest.Start(t)
		return srv.URL(), []redis.UniversalClient{redistest.NewClient(t, srv.URL())}
	}
	cluster := func(t *testing.T) (string, []redis.UniversalClient) {
		masters := redistest.StartClusterOf(t, 3)
		var cs []redis.UniversalClient
		for _, m := range masters {
			cs = append(cs, redistest.NewClient(t, m.URL()))
		}
		return clusterURL(masters), cs
	}
	setups := []setup{
		{"3 replicas 1:3:5", []int{1, 3, 5}, single, "user"},
		{"1 replica", []int{1}, single, "user"},
		{"3 replicas on a cluster", []int{1, 3, 5}, cluster, "user"},
		{"3 replicas sliding", []int{1, 3, 5}, single, "sliding"},
	}
	// The setups run at once, in one window: replicas first, then the
	// offers (subtests would run two at a time on a small machine).
	clients := make([][]rlsv3.RateLimitServiceClient, len(setups))
	masters := make([][]redis.UniversalClient, len(setups))
	for i, s := range setups {
		var url string
		url, masters[i] = s.url(t)
		_, clients[i] = approxReplicas(t, url, len(s.weights), "APPROXIMATE_SYNC_INTERVAL=100ms")
	}
	// The window: the current minute when 25 s of it are left (the limit
	// is spent in about 10 s), else the next; the offer ends 1.5 s before
	// it does, so that the counters are still in Redis to be read.
	start := time.Now()
	end := start.Truncate(time.Minute).Add(time.Minute)
	if end.Sub(start) < 25*time.Second {
		start, end = end, end.Add(time.Minute)
	}
	time.Sleep(time.Until(start))
	got := make([][]int64, len(setups))
	var wg sync.WaitGroup
	for i, s := range setups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = offer(t, clients[i], s.weights, s.key, "alice", 6*2000.0/60, end.Add(-1500*time.Millisecond))
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the last sync
	for i, s := range setups {
		var admitted int64
		for _, n := range got[i] {
			admitted += n
		}
		inRedis := windowCount(t, masters[i], end.Add(-time.Minute).UnixMicro()/time.Minute.Microseconds())
		t.Logf("%s: admitted %v = %d of 2000 (%+.2f %%); Redis counts %d", s.name, got[i], admitted, float64(admitted-2000)/20, inRedis)
		// (The sliding window's previous window is empty: the key is new
		// to its Redis.)
		if admitted < 1980 || admitted > 2020 {
			t.Errorf("%s: admitted %d in the window, want within 1 %% of 2000", s.name, admitted)
		}
		if inRedis != admitted {
			t.Errorf("%s: Redis counts %d, the replicas admitted %d: hits lost or counted twice", s.name, inRedis, admitted)
		}
	}
}

// callN asks n times for key=value and returns how many were admitted.
func callN(t *testing.T, c rlsv3.RateLimitServiceClient, key, value string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		admitted, err := approxCall(c, key, value)
		if err != nil {
			t.Fatal(err)
		}
		if admitted {
			ok++
		}
	}
	return ok
}

// waitCount waits up to 5 s for Redis to count want in window num.
func waitCount(t *testing.T, rdb redis.UniversalClient, num, want int64) int64 {
	t.Helper()
	var got int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = windowCount(t, []redis.UniversalClient{rdb}, num); got == want {
			break
		}
	}
	return got
}

// TestApproximateRedisDownAndBack: with Redis stopped, an approximate limit
// whose window Redis has answered is FAILURE_MODE's from its first spent
// lease on (an idle replica holds none): closed refuses, marked degraded;
// a new key spends its blind budget from memory. Once Redis is back,
// what was admitted blind is reported, unless its window ended meanwhile
// (then it is given up and counted), and the limits are decided as before.
func TestApproximateRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	servers, clients := approxReplicas(t, srv.URL(), 1, "FAILURE_MODE=closed")
	c, rdb := clients[0], redistest.NewClient(t, srv.URL())
	// The whole test in one hour: its counts are read in the hour it began.
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 40*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	hour := time.Now().Unix() / 3600
	if got := callN(t, c, "down", "w", 100); got != 100 {
		t.Fatalf("before the outage: %d of 100 admitted", got)
	}
	// Its lease back (an idle replica holds none), Redis counts what was
	// admitted; the replica count settled (blind budgets on).
	if got := waitCount(t, rdb, hour, 100); got != 100 {
		t.Fatalf("before the outage Redis counts %d, want 100", got)
	}
	waitMetric(t, servers[0], "throttle_approximate_replicas", 1)
	degraded := servers[0].Metric(t, "throttle_degraded_decisions_total")
	srv.Stop()
	wide, short := callN(t, c, "down", "w", 50), callN(t, c, "short", "s", 30)
	if wide != 0 || short != 30 {
		t.Errorf("Redis just stopped, FAILURE_MODE=closed: admitted %d of 50 (a key Redis answered: the policy's) and %d of 30 (a new key's blind budget), want 0 and 30", wide, short)
	}
	if got := servers[0].Metric(t, "throttle_degraded_decisions_total") - degraded; got != 50 {
		t.Errorf("degraded decisions while Redis is stopped = %v, want 50", got)
	}
	time.Sleep(2500 * time.Millisecond) // the syncs fail for over a second; the 2 s window ends
	if got := callN(t, c, "down", "w", 20); got != 0 {
		t.Errorf("Redis gone for 2.5 s, FAILURE_MODE=closed: %d of 20 admitted, want 0", got)
	}
	srv.Restart() // without persistence: the 100 counted before are gone with it
	// The syncer gives the ended window's hits up as it reaches them (a
	// busy machine may take a few rounds): wait for all 30.
	var dropped float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if dropped = servers[0].Metric(t, "throttle_approximate_dropped_hits_total"); dropped == 30 {
			break
		}
	}
	if dropped != 30 {
		t.Errorf("dropped hits = %v, want 30 (their 2 s window ended while Redis was gone)", dropped)
	}
	// Back: the master answers a probe (nothing was due to sync) and the
	// limit is Redis's again.
	var got int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = callN(t, c, "down", "w", 1); got == 1 {
			break
		}
	}
	if got != 1 {
		t.Fatalf("Redis back for 5 s: still refused")
	}
	if got := callN(t, c, "down", "w", 10); got != 10 {
		t.Errorf("Redis back: %d of 10 admitted, want 10", got)
	}
	if got := waitCount(t, rdb, hour, 11); got != 11 {
		t.Errorf("Redis back: it counts %d hits of the hour, want the 11 admitted since", got)
	}
}

// waitMetric waits up to 10 s for s's metric name to be want.
func waitMetric(t *testing.T, s *throttletest.Server, name string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.Metric(t, name) != want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 10 s, want %v", name, s.Metric(t, name), want)
		}
	}
}

// TestApproximateKillLosesNothing: a replica killed with kill -9 in the
// middle of traffic (1,000 calls a second) loses no admitted hit: what it
// admitted came out of its lease, which Redis counted when it granted it.
// What it had not spent of its lease (about two 100 ms intervals of its
// rate: ~200) stays counted until another replica's call finds it expired
// (TestApproximateKilledLeaseReturns); here none calls.
func TestApproximateKillLosesNothing(t *testing.T) {
	srv := redistest.Start(t)
	servers, clients := approxReplicas(t, srv.URL(), 1)
	rdb := redistest.NewClient(t, srv.URL())
	hour := time.Now().Unix() / 3600
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // 4 × 250 calls a second
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next := time.Now(); ; next = next.Add(4 * time.Millisecond) {
				select {
				case <-stop:
					return
				default:
				}
				time.Sleep(time.Until(next))
				if ok, err := approxCall(clients[0], "mid", "k9"); err == nil && ok {
					admitted.Add(1)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	if err := servers[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-servers[0].Exited
	close(stop)
	wg.Wait()
	inRedis := windowCount(t, []redis.UniversalClient{rdb}, hour)
	leased := inRedis - admitted.Load()
	t.Logf("kill -9 at about 1,000 calls a second: %d admitted, %d in Redis: %d of its lease unspent", admitted.Load(), inRedis, leased)
	if leased < 0 || leased > 1000 {
		t.Errorf("%d admitted, %d in Redis: want every admitted hit in Redis, and at most 1,000 more (its lease: ~200)", admitted.Load(), inRedis)
	}
}

// TestApproximateNoFalseRefusals: a key whose hits stay below its limit is
// never refused, however fast they come: half the limit (1,000 of 2,000 a
// minute) at once across 2 replicas, fixed and sliding windows, all
// admitted — on replicas just started (the first burst: exact until they
// know the replica count) and on settled ones (a fresh key: the leases
// grow with the burst, and a replica whose lease is spent asks Redis).
func TestApproximateNoFalseRefusals(t *testing.T) {
	srv := redistest.Start(t)
	_, clients := approxReplicas(t, srv.URL(), 2, "APPROXIMATE_SYNC_INTERVAL=100ms")
	for round, value := range []string{"fresh", "settled"} {
		if round == 1 {
			time.Sleep(time.Second) // the replicas have synced and count each other
		}
		for _, key := range []string{"user", "sliding"} {
			began := time.Now()
			admitted, err := burstOf(clients, key, value, 1000, 32)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s: %d of 1000 admitted in %s", value, key, admitted, time.Since(began))
			if admitted != 1000 {
				t.Errorf("%s %s: %d of 1000 admitted (half the limit), want all", value, key, admitted)
			}
		}
	}
}

// burstOf makes n calls of key=value as fast as the clients answer,
// through workers goroutines on each, and returns how many were admitted.
func burstOf(clients []rlsv3.RateLimitServiceClient, key, value string, n int64, workers int) (int64, error) {
	var calls, admitted atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for _, c := range clients {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for calls.Add(1) <= n {
					ok, err := approxCall(c, key, value)
					if err != nil {
						failed.Store(err)
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return admitted.Load(), err
	}
	return admitted.Load(), nil
}
