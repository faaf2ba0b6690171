package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
	"github.com/throttle-rl/throttle/internal/testkit/xdstest"
	"github.com/throttle-rl/throttle/xdsconfig"
)

// The race of check-then-charge, closed through Envoy's call shapes
// (docs/envoy-ai-gateway-reservations.md): a budget of 10,000 tokens an
// hour, reserve hits 1,000; 200 concurrent requests each make the request
// path's call (hits_addend 0, the handle a unique request id) on one of 3
// replicas, within 300 ms of each other, and, if it is OK, the response
// path's (hits_addend 0–1,500, 0 being the commit of nothing) on another,
// 10–50 ms later.
const (
	resvBudget   = 10000
	resvHits     = 1000
	resvRequests = 200
	resvMaxCost  = 1500
)

// tokenBucketYAML is a token bucket of resvBudget tokens, refilled so
// slowly that a run refills less than a token, reserving resvHits.
const tokenBucketYAML = `domain: llm
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 10000
      algorithm: token_bucket
      refill_rate: 0.001
      always_count: true
      reserve: {hits: 1000, ttl: 60s, handle: request_id}
`

// TestEnvoyReservations runs the race through the built binary, 3
// replicas on one real Redis: with a fixed window from Envoy Gateway's
// descriptors of Envoy AI Gateway's token policy (plus an x-request-id
// Distinct selector) over xDS, made a reservation by the overlay of the
// docs; and with a token bucket from descriptor YAML. Never more than
// budget/hits requests are admitted and uncommitted at once, and what
// Redis counts in the end is the sum of the commits, exactly. Before the
// race, one request shows limit_remaining and x-ratelimit-remaining fall by
// the hold at request time, and rise again when the response commits 0.
func TestEnvoyReservations(t *testing.T) {
	waitOffHourEdge(t)
	srvRedis := redistest.Start(t)
	rdb := redistest.NewClient(t, srvRedis.URL())
	common := []string{"REDIS_URL=" + srvRedis.URL(), "RATE_LIMIT_RESPONSE_HEADERS=true", "RATE_LIMIT_HEADERS=x"}

	t.Run("fixed window, Envoy Gateway over xDS with the overlay", func(t *testing.T) {
		cp := xdstest.Start(t, xdstest.Options{})
		cp.Set(t, egNode, "1", xdstest.AIGatewayTokens(resvBudget))
		overlay := filepath.Join(t.TempDir(), "overlay.yaml")
		if err := os.WriteFile(overlay, []byte(docBlock(t, "reservations:")), 0o644); err != nil {
			t.Fatal(err)
		}
		rls := envoyReplicas(t, append(common, "CACHE_KEY_PREFIX=fw_", "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+cp.Addr,
			"CONFIG_GRPC_XDS_NODE_ID="+egNode, "RESERVATION_OVERLAY="+overlay))
		call := func(tenant, id string, hits uint64) *rlsv3.RateLimitRequest {
			return &rlsv3.RateLimitRequest{Domain: xdstest.AIGatewayDomain,
				Descriptors: []*rlcommon.RateLimitDescriptor{xdstest.AIGatewayDescriptor(0, tenant, id, hits)}}
		}
		wantHeldAtRequestTime(t, rls, call)
		committed := raceReservations(t, rls, call)
		if got := redisCount(t, rdb, "fw_", "acme"); got != committed {
			t.Errorf("the window's count in Redis = %d, want the sum of the commits, %d", got, committed)
		}
	})

	t.Run("token bucket, descriptor YAML", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"llm.yaml": tokenBucketYAML})
		rls := envoyReplicas(t, append(common, "CACHE_KEY_PREFIX=tb_", "DESCRIPTORS_DIR="+dir))
		call := func(tenant, id string, hits uint64) *rlsv3.RateLimitRequest {
			return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{{
				Entries:    []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}, {Key: "request_id", Value: id}},
				HitsAddend: wrapperspb.UInt64(hits),
			}}}
		}
		wantHeldAtRequestTime(t, rls, call)
		committed := raceReservations(t, rls, call)
		if got := redisCount(t, rdb, "tb_", "acme"); got != committed {
			t.Errorf("the bucket's tokens taken in Redis = %d, want the sum of the commits, %d", got, committed)
		}
	})
}

// waitOffHourEdge waits past the end of the hour when less than a minute
// of it is left: the race's windows are hours.
func waitOffHourEdge(t *testing.T) {
	t.Helper()
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < time.Minute {
		t.Logf("waiting %s for the next hour", left)
		time.Sleep(left + time.Second)
	}
}

// envoyReplicas starts 3 replicas with env and returns a client of each;
// GET /rlconfig of the first shows the reservation.
func envoyReplicas(t *testing.T, env []string) []rlsv3.RateLimitServiceClient {
	t.Helper()
	var out []rlsv3.RateLimitServiceClient
	env = append(env, "RLCONFIG_ON_REST_PORT=true") // (off by default: the operator's limits)
	for i := range 3 {
		s := throttletest.Start(t, env...)
		out = append(out, rlsClientAt(t, s.GRPCAddr))
		if i == 0 {
			if dump := getOK(t, s.URL+"/rlconfig"); !strings.Contains(dump, "reserve: hits=1000 ttl=1m0s handle=") {
				t.Errorf("GET /rlconfig does not show the reservation:\n%s", dump)
			}
		}
	}
	return out
}

// resvCall is Envoy's call for tenant's request id with hits_addend hits.
type resvCall func(tenant, id string, hits uint64) *rlsv3.RateLimitRequest

// wantHeldAtRequestTime: a request's reserve shows in limit_remaining and
// x-ratelimit-remaining at once; the response's commit of 0, on another
// replica, gives it all back.
func wantHeldAtRequestTime(t *testing.T, rls []rlsv3.RateLimitServiceClient, call resvCall) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rls[0].ShouldRateLimit(ctx, call("probe", "probe-1", 0))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("request path: %v, %v; want OK", resp.GetOverallCode(), err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != resvBudget-resvHits {
		t.Errorf("request path: limit_remaining %d, want %d (the hold gone from it)", got, resvBudget-resvHits)
	}
	if got := header(resp, "X-RateLimit-Remaining"); got != strconv.Itoa(resvBudget-resvHits) {
		t.Errorf("request path: x-ratelimit-remaining %q, want %d", got, resvBudget-resvHits)
	}
	resp, err = rls[1].ShouldRateLimit(ctx, call("probe", "probe-1", 0))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != resvBudget {
		t.Errorf("response path, commit 0: remaining %d, %v; want %d", resp.GetStatuses()[0].GetLimitRemaining(), err, resvBudget)
	}
}

// raceReservations runs the race for tenant acme and returns the sum of
// the commits. It fails the test when more than budget/hits requests are
// ever admitted and uncommitted at once: a request counts as outstanding
// from its OK until just before its commit is sent, which is never longer
// than its hold is in Redis.
func raceReservations(t *testing.T, rls []rlsv3.RateLimitServiceClient, call resvCall) int64 {
	t.Helper()
	var (
		out, most, admitted, committed atomic.Int64
		start                          = make(chan struct{})
		wg                             sync.WaitGroup
	)
	for i := range resvRequests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			id := fmt.Sprintf("req-%d", i)
			<-start
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // arrivals spread, so commits free quota for later ones
			resp, err := rls[rand.IntN(len(rls))].ShouldRateLimit(ctx, call("acme", id, 0))
			if err != nil {
				t.Errorf("%s request path: %v", id, err)
				return
			}
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				return
			}
			admitted.Add(1)
			n := out.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
			cost := uint64(rand.IntN(resvMaxCost + 1))
			out.Add(-1)
			if _, err := rls[rand.IntN(len(rls))].ShouldRateLimit(ctx, call("acme", id, cost)); err != nil {
				t.Errorf("%s response path: %v", id, err)
				return
			}
			committed.Add(int64(cost))
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("%d of %d requests admitted, at most %d outstanding at once, %d tokens committed", admitted.Load(), resvRequests, most.Load(), committed.Load())
	if m := most.Load(); m > resvBudget/resvHits {
		t.Errorf("%d requests admitted and uncommitted at once, want at most %d", m, resvBudget/resvHits)
	}
	if admitted.Load() == 0 {
		t.Error("no request admitted")
	}
	return committed.Load()
}

// windowCounter is a fixed window's counter key: …}:fw:<limit>:<window number>.
var windowCounter = regexp.MustCompile(`}:fw:.*:\d+$`)

// redisCount reads what Redis counts for tenant under the key prefix: the
// fixed window's counter, or a token bucket's tokens taken (capacity less
// the tokens it holds, rounded: the refill of a run is below a token).
func redisCount(t *testing.T, rdb *redis.Client, prefix, tenant string) int64 {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*"+tenant+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, k := range keys {
		switch typ := rdb.Type(ctx, k).Val(); {
		case typ == "string" && windowCounter.MatchString(k):
			n, err := rdb.Get(ctx, k).Int64()
			if err != nil {
				t.Fatal(err)
			}
			counts = append(counts, n)
		case typ == "hash":
			if v, err := rdb.HGet(ctx, k, "t").Float64(); err == nil {
				counts = append(counts, resvBudget-int64(math.Round(v)))
			}
		}
	}
	if len(counts) != 1 {
		t.Fatalf("found %d counters of %s under %s in Redis (%v), want 1", len(counts), tenant, prefix, keys)
	}
	return counts[0]
}

// docBlock is the YAML block of docs/envoy-ai-gateway-reservations.md
// that starts with start.
func docBlock(t *testing.T, start string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/envoy-ai-gateway-reservations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(" + regexp.QuoteMeta(start) + ".*?)```").FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("docs/envoy-ai-gateway-reservations.md has no YAML block starting %q", start)
	}
	return m[1]
}

// TestReservationDocs: the descriptor YAML of the docs loads and reserves
// as they say, and their overlay is one RESERVATION_OVERLAY reads.
func TestReservationDocs(t *testing.T) {
	cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: "doc", Data: []byte(docBlock(t, "domain: llm"))})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Match("llm", []descriptors.Entry{{Key: "tenant", Value: "acme"}, {Key: "request_id", Value: "r"}})
	if m == nil || m.Handle != "r" || m.Limit.Reserve == nil || m.Limit.Reserve.Hits != resvHits {
		t.Errorf("the docs' YAML: match %+v, want a reserve of %d under handle r", m, resvHits)
	}
	if dump := cfg.Dump(); !strings.Contains(dump, "reserve: hits=1000 ttl=1m0s handle=request_id") {
		t.Errorf("Dump = %s", dump)
	}
	res, err := xdsconfig.ParseReservations("doc", []byte(docBlock(t, "reservations:")), algorithms.DefaultMaxHoldTTL)
	if err != nil || len(res.Entries) != 1 || res.Entries[0].Domain != xdstest.AIGatewayDomain {
		t.Errorf("the docs' overlay: %+v, %v; want one entry for %s", res, err, xdstest.AIGatewayDomain)
	}
}

// TestConfigCheckReserve: `throttle config check` takes reserve and names
// the file, line and path of a problem in it, with MAX_RESERVATION_TTL as
// serve has it.
func TestConfigCheckReserve(t *testing.T) {
	bin := throttletest.Binary(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"llm.yaml": tokenBucketYAML})
	good := filepath.Join(dir, "llm.yaml")
	if out, err := exec.Command(bin, "config", "check", good).CombinedOutput(); err != nil || string(out) != "1 file(s) OK\n" {
		t.Errorf("config check llm.yaml: %v %s", err, out)
	}
	cmd := exec.Command(bin, "config", "check", good)
	cmd.Env = append(os.Environ(), "MAX_RESERVATION_TTL=30s")
	out, err := cmd.CombinedOutput()
	want := good + `:10: domain "llm" › descriptors[0] › rate_limit › reserve: reserve ttl 1m0s is longer than MAX_RESERVATION_TTL, 30s`
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("config check with MAX_RESERVATION_TTL=30s: %v\n%s\nwant %s", err, out, want)
	}
}
