package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/redistest"
	"github.com/throttle-rl/throttle/internal/throttletest"
)

// Approximate limits through the built binary: replicas on a real Redis
// (and a Redis Cluster) keep one limit within 2 % on uneven traffic, Redis
// stopped and started again loses no admitted hit, and a replica killed
// with kill -9 loses at most about one sync interval of hits.

const approxDescriptors = `domain: approx
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2000, accuracy: approximate}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2000, algorithm: sliding_window, accuracy: approximate}
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 1000000, accuracy: approximate}
  - key: short
    rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 1000000, accuracy: approximate}
`

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
	total := 0
	for _, w := range weights {
		total += w
	}
	admitted := make([]int64, len(clients))
	var failed atomic.Value
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			perSecond := rate * float64(weights[i]) / float64(total)
			const tick = 10 * time.Millisecond
			owed := 0.0
			for next := time.Now(); next.Before(end); next = next.Add(tick) {
				time.Sleep(time.Until(next))
				for owed += perSecond * tick.Seconds(); owed >= 1; owed-- {
					ok, err := approxCall(c, key, value)
					if err != nil {
						failed.Store(err)
						return
					}
					if ok {
						admitted[i]++
					}
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatal(err)
	}
	return admitted
}

// windowCount sums the Redis counters of window number num on every master.
func windowCount(t *testing.T, masters []redis.UniversalClient, num int64) int64 {
	t.Helper()
	suffix := ":" + strconv.FormatInt(num, 10)
	var sum int64
	for _, m := range masters {
		keys, err := m.Keys(context.Background(), "*"+suffix).Result()
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

// TestApproximateWithinTwoPercent: one key at 2,000 per minute, offered
// about six times that, unevenly over the replicas (1 : 3 : 5), admits
// within 2 % of 2,000 in the window: 3 replicas on one Redis, 1 replica,
// and 3 replicas on a Redis Cluster, at once (one window for all three).
// Every admitted hit is in Redis afterwards.
func TestApproximateWithinTwoPercent(t *testing.T) {
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
		if admitted < 1960 || admitted > 2040 {
			t.Errorf("%s: admitted %d in the window, want within 2 %% of 2000", s.name, admitted)
		}
		if inRedis != admitted {
			t.Errorf("%s: Redis counts %d, the replicas admitted %d: hits lost or counted twice", s.name, inRedis, admitted)
		}
	}
}
