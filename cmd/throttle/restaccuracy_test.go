package main

import (
	"context"
	"io"
	"strconv"
	"strings"
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

// TestRESTApproximateRule: a REST rule with "accuracy": "approximate",
// through the built binary on a Redis of its own. /check through it is
// decided from memory (exactly until the replica has read the replica
// count), its hits covered by a lease from Redis, and once the replica is
// idle its lease goes back: Redis counts the hits. An Envoy request matched
// by an approximate rule with descriptors is decided from memory too. A
// token bucket rule with approximate is refused.
func TestRESTApproximateRule(t *testing.T) {
	srv := redistest.Start(t)
	s := throttletest.Start(t, "REDIS_URL="+srv.URL(), "APPROXIMATE_SYNC_INTERVAL=100ms", "CLAIMABLE_DOMAINS=rest-accuracy")
	key := s.RegisterDomain(t, "rest accuracy", "rest-accuracy", "")
	code, _, rule := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"hourly","algorithm":"fixed_window","limit":640,"window":3600,"accuracy":"approximate"}`)
	if code != 201 || rule["accuracy"] != "approximate" {
		t.Fatalf("POST /rules approximate = %d %v", code, rule)
	}
	const n = 8
	for i := range n {
		code, _, got := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"u","rule":"hourly"}`)
		if code != 200 || got["allowed"] != true || got["limit"] != float64(640) {
			t.Fatalf("check %d = %d %v", i, code, got)
		}
	}
	// Three sync intervals; then, on a machine too busy for that, up to 5 s
	// more (a deadline, not a measure).
	time.Sleep(300 * time.Millisecond)
	rdb := redistest.NewClient(t, srv.URL())
	var counted int64
	var keys []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if counted, keys = ruleCount(t, rdb, ":u}:fw:n:rule:hourly@"); counted == n || time.Now().After(deadline) {
			break
		}
	}
	if counted != n {
		t.Errorf("Redis counts %d hits of the rule (KEYS * = %q), want %d", counted, keys, n)
	}
	approx := map[string]string{"api": "rest", "accuracy": "approximate", "algorithm": "fixed_window", "outcome": "allowed"}
	if got := metricWith(t, s, "throttle_decisions_total", approx); got != n {
		t.Errorf("throttle_decisions_total%v = %v, want %d", approx, got, n)
	}
	if got := metricWith(t, s, "throttle_redis_decisions_total", map[string]string{"accuracy": "approximate"}); got != n {
		t.Errorf("throttle_redis_decisions_total{accuracy=approximate} = %v, want %d", got, n)
	}

	// Envoy: a rule with descriptors on the client's domain.
	code, _, rule = doJSON(t, "POST", s.URL+"/rules", key, `{"name":"edge","algorithm":"sliding_window","limit":640,"window":3600,"accuracy":"approximate","descriptors":[{"key":"user"}]}`)
	if code != 201 || rule["accuracy"] != "approximate" {
		t.Fatalf("POST /rules approximate with descriptors = %d %v", code, rule)
	}
	_, _, me := doJSON(t, "GET", s.URL+"/me", key, "")
	domain, _ := me["domain"].(string)
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rls := rlsv3.NewRateLimitServiceClient(conn)
	const m = 6
	for i := range m {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "acme"}},
		}}})
		cancel()
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 640 {
			t.Fatalf("ShouldRateLimit %d on domain %q = %v, %v", i, domain, resp, err)
		}
	}
	if got := metricWith(t, s, "throttle_redis_decisions_total", map[string]string{"accuracy": "approximate"}); got != n+m {
		t.Errorf("throttle_redis_decisions_total{accuracy=approximate} after the Envoy requests = %v, want %d", got, n+m)
	}

	code, _, refusal := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"bucket","algorithm":"token_bucket","limit":10,"accuracy":"approximate"}`)
	if want := "accuracy approximate applies to fixed_window and sliding_window, not token_bucket (whose every decision must read and write the shared state)"; code != 400 || refusal["error"] != want {
		t.Errorf("token bucket rule with approximate = %d %v, want 400 %q", code, refusal, want)
	}
	if logs := s.Logs.String(); strings.Contains(logs, "register REST API metric") {
		t.Errorf("a REST API metric was refused at registration:\n%s", logs)
	}
}

// ruleCount is the sum of the counters whose keys contain part (the
// current window's; two across a window's end), among KEYS *, and those
// keys.
func ruleCount(t *testing.T, rdb *redis.Client, part string) (int64, []string) {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, k := range keys {
		if !strings.Contains(k, part) || strings.HasSuffix(k, ":l") { // (":l": an approximate limit's leases)
			continue
		}
		v, err := rdb.Get(context.Background(), k).Int64()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		sum += v
	}
	return sum, keys
}

// metricWith sums the samples of metric family name on s's /metrics whose
// labels include labels.
func metricWith(t *testing.T, s *throttletest.Server, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := s.HTTP.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	var sum float64
lines:
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			t.Fatalf("metric line %q", line)
		}
		for k, v := range labels {
			if !strings.Contains(","+set+",", ","+k+"="+strconv.Quote(v)+",") {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += f
	}
	return sum
}
