package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The overload scenario of issue 8: three replicas on one Redis and one
// PostgreSQL, more concurrent clients than a 2-core machine can serve, 720
// checks of one identifier against limit 150 per hour.
const (
	overloadLimit    = 150
	overloadRequests = 720
	restClients      = 120
	grpcStreams      = 64
)

const overloadDescriptors = `domain: overload
descriptors:
  - key: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 150}
  - key: sliding_window
    rate_limit: {unit: hour, requests_per_unit: 150, algorithm: sliding_window}
  - key: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 150, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 150, algorithm: gcra}
`

// replicaSet is several replicas of the built binary on one Redis (or Redis
// Cluster) and one PostgreSQL, with a client registered on them.
type replicaSet struct {
	redis    *redistest.Server // nil when the test brought its own Redis
	replicas []*throttletest.Server
	conns    []*grpc.ClientConn
	key      string
	http     *http.Client
}

// startCluster runs n replicas on a Redis of their own.
func startCluster(t testing.TB, n int, env ...string) *replicaSet {
	t.Helper()
	srv := redistest.Start(t)
	c := startReplicas(t, srv.URL(), n, env...)
	c.redis = srv
	return c
}

// startReplicas runs n replicas on the Redis at redisURL, with the
// overload domain and FAILURE_MODE=open unless env says otherwise.
func startReplicas(t testing.TB, redisURL string, n int, env ...string) *replicaSet {
	t.Helper()
	c := &replicaSet{}
	descDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(descDir, "overload.yaml"), []byte(overloadDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	env = append([]string{"REDIS_URL=" + redisURL, "DATABASE_URL=" + freshPostgres(t), "DESCRIPTORS_DIR=" + descDir,
		"FAILURE_MODE=open", "CACHE_REFRESH_INTERVAL=200ms"}, env...)
	for range n {
		c.replicas = append(c.replicas, throttletest.Start(t, env...))
	}
	c.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: restClients, MaxConnsPerHost: restClients}}
	t.Cleanup(c.http.CloseIdleConnections)
	c.key = c.replicas[0].Register(t, "overload-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	for _, r := range c.replicas {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, _ := c.post(r, "/me", "")
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s does not know the new key after 10s (last status %d)", r.URL, code)
			}
			time.Sleep(50 * time.Millisecond)
		}
		conn, err := grpc.NewClient(r.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		c.conns = append(c.conns, conn)
	}
	return c
}

// post sends a JSON body (GET when body is empty) with the client's key and
// returns the status and the decoded reply.
func (c *replicaSet) post(r *throttletest.Server, path, body string) (int, map[string]any) {
	method := http.MethodPost
	if body == "" {
		method = http.MethodGet
	}
	req, _ := http.NewRequest(method, r.URL+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, map[string]any{"transport_error": err.Error()}
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if ra := resp.Header.Get("Retry-After"); ra != "" && out != nil {
		out["Retry-After"] = ra
	}
	return resp.StatusCode, out
}

// outcomes counts what a burst of calls got back, and how long each took.
type outcomes struct {
	mu        sync.Mutex
	counts    map[string]int
	latencies []time.Duration
	examples  map[string]string
}

func (o *outcomes) add(outcome string, took time.Duration, detail string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts, o.examples = map[string]int{}, map[string]string{}
	}
	o.counts[outcome]++
	o.latencies = append(o.latencies, took)
	if _, ok := o.examples[outcome]; !ok {
		o.examples[outcome] = detail
	}
}

// quantile returns the q-quantile of the latencies (0 ≤ q ≤ 1).
func (o *outcomes) quantile(q float64) time.Duration {
	if len(o.latencies) == 0 {
		return 0
	}
	l := slices.Clone(o.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// burst runs n calls of do from workers goroutines at once; do(i) returns
// the call's outcome and a detail kept for the first call of each outcome.
func burst(n, workers int, do func(i int) (string, string)) *outcomes {
	o := &outcomes{}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				outcome, detail := do(i)
				o.add(outcome, time.Since(t0), detail)
			}
		}()
	}
	close(start)
	wg.Wait()
	return o
}

// restBurst sends n checks of identifier with alg from clients at once,
// spread over the replicas.
func (c *replicaSet) restBurst(n, clients int, identifier, alg string) *outcomes {
	// One body for every algorithm, as the product description's clients
	// send it: refill_rate is ignored where it does not apply.
	body := fmt.Sprintf(`{"identifier":%q,"limit":%d,"window":3600,"algorithm":%q,"refill_rate":%g}`,
		identifier, overloadLimit, alg, float64(overloadLimit)/3600)
	return burst(n, clients, func(i int) (string, string) {
		code, reply := c.post(c.replicas[i%len(c.replicas)], "/check", body)
		switch {
		case code == http.StatusOK && reply["allowed"] == true:
			return "allowed", ""
		case code == http.StatusOK && reply["allowed"] == false:
			return "rejected", ""
		}
		return strconv.Itoa(code), fmt.Sprint(reply)
	})
}

// grpcBurst sends n ShouldRateLimit calls for descriptor key=value from
// streams goroutines at once, each call with deadline timeout.
func (c *replicaSet) grpcBurst(n, streams int, key, value string, timeout time.Duration) *outcomes {
	req := &rlsv3.RateLimitRequest{Domain: "overload", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
	return burst(n, streams, func(i int) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		resp, err := rlsv3.NewRateLimitServiceClient(c.conns[i%len(c.conns)]).ShouldRateLimit(ctx, req)
		if err != nil {
			return status.Code(err).String(), err.Error()
		}
		return resp.GetOverallCode().String(), ""
	})
}

// metric sums a metric over the replicas.
func (c *replicaSet) metric(t testing.TB, name string) float64 {
	t.Helper()
	var sum float64
	for _, r := range c.replicas {
		sum += r.Metric(t, name)
	}
	return sum
}

func wantCounts(t *testing.T, what string, o *outcomes, want map[string]int) {
	t.Helper()
	if fmt.Sprint(o.counts) != fmt.Sprint(want) {
		t.Errorf("%s: got %v, want %v (p50 %v, p99 %v; first of each: %v)", what, o.counts, want, o.quantile(0.5), o.quantile(0.99), o.examples)
		return
	}
	t.Logf("%s: %v, p50 %v, p99 %v, max %v", what, o.counts, o.quantile(0.5), o.quantile(0.99), o.quantile(1))
}

// exactly checks every algorithm through REST and gRPC: exactly the limit
// admitted, and nothing decided by the failure policy.
func (c *replicaSet) exactly(t *testing.T, phase string) {
	t.Helper()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket", "gcra"} {
		// A fresh identifier has no previous window, so the sliding
		// window is exact too.
		o := c.restBurst(overloadRequests, restClients, phase+"-rest-"+alg+"-"+run, alg)
		wantCounts(t, fmt.Sprintf("%s: REST %s, %d checks from %d clients", phase, alg, overloadRequests, restClients), o,
			map[string]int{"allowed": overloadLimit, "rejected": overloadRequests - overloadLimit})
		o = c.grpcBurst(overloadRequests, grpcStreams, alg, phase+"-grpc-"+run, 5*time.Second)
		wantCounts(t, fmt.Sprintf("%s: gRPC %s, %d calls from %d streams", phase, alg, overloadRequests, grpcStreams), o,
			map[string]int{"OK": overloadLimit, "OVER_LIMIT": overloadRequests - overloadLimit})
	}
}

// TestLimitsHoldUnderOverload: while Redis answers, every decision comes
// from Redis however loaded the machine is; when Redis stops, the failure
// policy answers within the deadline; when it is back, the circuit closes by
// itself within 2s and counting is exact again.
func TestLimitsHoldUnderOverload(t *testing.T) {
	c := startCluster(t, 3)

	t.Run("redis up", func(t *testing.T) {
		c.exactly(t, "up")
		for _, m := range []string{"throttle_degraded_decisions_total", "throttle_backend_errors_total", "throttle_shed_total"} {
			if got := c.metric(t, m); got != 0 {
				t.Errorf("%s = %v over the replicas while Redis was up, want 0", m, got)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("redis stopped", func(t *testing.T) {
		c.redis.Stop()
		o := c.restBurst(360, restClients, "down-"+strconv.FormatInt(time.Now().UnixNano(), 36), "fixed_window")
		wantCounts(t, "REST with Redis stopped, FAILURE_MODE=open", o, map[string]int{"allowed": 360})
		// A call Envoy makes with its own deadline: the policy answers
		// before it, never DEADLINE_EXCEEDED.
		g := c.grpcBurst(192, grpcStreams, "fixed_window", "down", 200*time.Millisecond)
		wantCounts(t, "gRPC with Redis stopped, 200ms deadline", g, map[string]int{"OK": 192})
		for i, r := range c.replicas {
			if got := r.Metric(t, "throttle_backend_circuit_open"); got != 1 {
				t.Errorf("replica %d: circuit open = %v with Redis stopped, want 1", i, got)
			}
		}
		if got := c.metric(t, "throttle_degraded_decisions_total"); got != 360+192 {
			t.Errorf("degraded decisions = %v, want %d", got, 360+192)
		}
	})

	t.Run("redis back", func(t *testing.T) {
		c.redis.Restart()
		back := time.Now()
		// No traffic: each replica's circuit closes by itself.
		for i, r := range c.replicas {
			for r.Metric(t, "throttle_backend_circuit_open") != 0 {
				if time.Since(back) > 2*time.Second {
					t.Fatalf("replica %d: circuit still open %v after Redis came back", i, time.Since(back))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		t.Logf("every circuit closed %v after Redis came back", time.Since(back))
		before := c.metric(t, "throttle_degraded_decisions_total")
		c.exactly(t, "back")
		if got := c.metric(t, "throttle_degraded_decisions_total"); got != before {
			t.Errorf("%v degraded decisions after Redis came back, want 0", got-before)
		}
	})
}

// BenchmarkOverload drives three replicas of the built binary on one Redis
// at rising concurrency, REST and gRPC, each round b.N checks of one fresh
// identifier whose limit is a quarter of them. Beside the speed it reports
// what holds: admitted (must equal limit), degraded (decisions made by the
// failure policy, must be 0 with Redis up) and shed (503/UNAVAILABLE, no
// decision). Run: make bench-overload.
func BenchmarkOverload(b *testing.B) {
	c := startCluster(b, 3)
	for _, api := range []string{"rest", "grpc"} {
		for _, conc := range []int{16, 64, 128, 256, 512} {
			b.Run(fmt.Sprintf("%s/clients=%d", api, conc), func(b *testing.B) {
				id := fmt.Sprintf("bench-%s-%d-%d", api, conc, time.Now().UnixNano())
				limit := max(1, b.N/4)
				degradedBefore := c.metric(b, "throttle_degraded_decisions_total")
				b.ResetTimer()
				start := time.Now()
				var o *outcomes
				if api == "rest" {
					body := fmt.Sprintf(`{"identifier":%q,"limit":%d,"window":3600,"algorithm":"fixed_window"}`, id, limit)
					o = burst(b.N, conc, func(i int) (string, string) {
						code, reply := c.post(c.replicas[i%len(c.replicas)], "/check", body)
						switch {
						case code == http.StatusOK && reply["allowed"] == true:
							return "allowed", ""
						case code == http.StatusOK:
							return "rejected", ""
						case code == http.StatusServiceUnavailable:
							return "shed", fmt.Sprint(reply)
						}
						return strconv.Itoa(code), fmt.Sprint(reply)
					})
				} else {
					o = c.grpcLimitBurst(b.N, conc, id, limit)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				degraded := c.metric(b, "throttle_degraded_decisions_total") - degradedBefore
				admitted := o.counts["allowed"] + o.counts["OK"]
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
				b.ReportMetric(float64(o.quantile(0.5).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(o.quantile(0.99).Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(admitted), "admitted")
				b.ReportMetric(float64(limit), "limit")
				b.ReportMetric(degraded, "degraded")
				b.ReportMetric(float64(o.counts["shed"]+o.counts["Unavailable"]), "shed")
				if admitted > limit || degraded > 0 {
					b.Errorf("admitted %d of limit %d, %v degraded: %v", admitted, limit, degraded, o.counts)
				}
			})
		}
	}
}

// grpcLimitBurst sends n ShouldRateLimit calls with a per-request limit
// override of limit per hour (the descriptor's own limit is 150), from
// streams goroutines, each call with a 1s deadline.
func (c *replicaSet) grpcLimitBurst(n, streams int, value string, limit int) *outcomes {
	req := &rlsv3.RateLimitRequest{Domain: "overload", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "fixed_window", Value: value}},
		Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(limit), Unit: typev3.RateLimitUnit_HOUR},
	}}}
	return burst(n, streams, func(i int) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := rlsv3.NewRateLimitServiceClient(c.conns[i%len(c.conns)]).ShouldRateLimit(ctx, req)
		if err != nil {
			return status.Code(err).String(), err.Error()
		}
		return resp.GetOverallCode().String(), ""
	})
}
