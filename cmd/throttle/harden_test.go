package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

const userYAML = `domain: edge
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// startEdge runs the binary with userYAML in DESCRIPTORS_DIR and the extra
// settings, and returns a rate-limit client of it.
func startEdge(t *testing.T, env ...string) (*throttletest.Server, rlsv3.RateLimitServiceClient) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(userYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s := throttletest.Start(t, append([]string{"DESCRIPTORS_DIR=" + dir}, env...)...)
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn)
}

func users(first, n int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := first; i < first+n; i++ {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(i)}}})
	}
	return req
}

// TestMetricsStaySmall: 50,000 distinct detailed_metric values with
// STATS_MAX_VALUE_KEYS=1000, against the built binary. 1,000 value keys and
// the rolled-up key "user" each have a hits and a within_limit series and
// no other (they never went over or near their limits), and the whole of
// /metrics stays under 2,500 series (it was 6,158).
func TestMetricsStaySmall(t *testing.T) {
	const values, perCall, callers = 50_000, 50, 4
	s, rls := startEdge(t, "STATS_MAX_VALUE_KEYS=1000")
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for first := w * perCall; first < values; first += callers * perCall {
				resp, err := rls.ShouldRateLimit(ctx, users(first, perCall))
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Errorf("users %d…: %v, %v; want OK", first, resp.GetOverallCode(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	_, _, body := testkit.GetText(t, s.URL+"/metrics")
	series := map[string]int{}
	total := 0
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		total++
		if name, _, ok := strings.Cut(line, "{"); ok && strings.Contains(line, `domain="edge"`) {
			series[name]++
		}
	}
	for name, want := range map[string]int{
		"throttle_ratelimit_hits_total":                        1001,
		"throttle_ratelimit_within_limit_total":                1001,
		"throttle_ratelimit_near_limit_total":                  0,
		"throttle_ratelimit_over_limit_total":                  0,
		"throttle_ratelimit_shadow_mode_total":                 0,
		"throttle_ratelimit_over_limit_with_local_cache_total": 0,
	} {
		if series[name] != want {
			t.Errorf("%s{domain=\"edge\"}: %d series, want %d", name, series[name], want)
		}
	}
	if got := s.Metric(t, "throttle_ratelimit_stats_keys_folded_total"); got != values-1000 {
		t.Errorf("folded = %v, want %d", got, values-1000)
	}
	t.Logf("/metrics: %d series", total)
	if total >= 2500 {
		t.Errorf("/metrics has %d series, want fewer than 2,500", total)
	}
}

// TestDescriptorCaps: MAX_DESCRIPTORS_PER_REQUEST and MAX_DESCRIPTOR_ENTRIES
// reach the service: over them, INVALID_ARGUMENT naming the cap and the
// setting, nothing counted, and the refusal counted by reason.
func TestDescriptorCaps(t *testing.T) {
	s, rls := startEdge(t, "MAX_DESCRIPTORS_PER_REQUEST=3", "MAX_DESCRIPTOR_ENTRIES=2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := rls.ShouldRateLimit(ctx, users(0, 4))
	if want := "rate limit request has 4 descriptors, more than the 3 allowed (MAX_DESCRIPTORS_PER_REQUEST)"; status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("4 descriptors: err = %v, want InvalidArgument %q", err, want)
	}
	three := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u0"}, {Key: "a"}, {Key: "b"}}}
	_, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{three}})
	if want := "descriptor 0 has 3 entries, more than the 2 allowed (MAX_DESCRIPTOR_ENTRIES)"; status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("3 entries: err = %v, want InvalidArgument %q", err, want)
	}
	if got := s.Metric(t, "throttle_ratelimit_hits_total"); got != 0 {
		t.Errorf("hits after the refusals = %v, want 0", got)
	}
	resp, err := rls.ShouldRateLimit(ctx, users(0, 3))
	if err != nil || len(resp.GetStatuses()) != 3 || resp.GetStatuses()[0].GetLimitRemaining() != 99 {
		t.Errorf("3 descriptors: %v, %v; want 3 statuses, 99 remaining of u0", resp, err)
	}
	if got := s.Metric(t, "throttle_ratelimit_oversized_requests_total"); got != 2 {
		t.Errorf("oversized requests = %v, want 2", got)
	}
}

// TestStoreOutage: the binary on a PostgreSQL of the test's own, stopped
// and started again: the database's endpoints answer 503 STORE_UNAVAILABLE
// with Retry-After while it is down, counted in
// throttle_store_unavailable_total, /check keeps answering from its cache,
// and writes succeed once it is back.
func TestStoreOutage(t *testing.T) {
	pg := pgtest.StartServer(t)
	s := throttletest.Start(t, "DATABASE_URL="+pg.URL)
	key := s.Register(t, "outage app")
	pg.Stop(t)

	for _, call := range [][3]string{
		{"POST", "/rules", `{"name":"r1","algorithm":"fixed_window","limit":5,"window":60}`},
		{"GET", "/rules/list", ""},
		{"POST", "/exemptions", `{"identifier":"vip"}`},
		{"GET", "/exemptions/list", ""},
	} {
		status, hdr, body := doJSON(t, call[0], s.URL+call[1], key, call[2])
		if status != http.StatusServiceUnavailable || body["code"] != "STORE_UNAVAILABLE" || hdr.Get("Retry-After") != "1" {
			t.Errorf("%s %s with PostgreSQL stopped: %d %v (Retry-After %q), want 503 STORE_UNAVAILABLE, Retry-After 1",
				call[0], call[1], status, body, hdr.Get("Retry-After"))
		}
	}
	if status, _, body := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"u","limit":5,"window":60}`); status != http.StatusOK || body["allowed"] != true {
		t.Errorf("POST /check with PostgreSQL stopped: %d %v, want 200 allowed", status, body)
	}
	if got := s.Metric(t, "throttle_store_unavailable_total"); got < 4 {
		t.Errorf("throttle_store_unavailable_total = %v, want at least the 4 calls", got)
	}

	pg.Start(t)
	var status int
	var body map[string]any
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if status, _, body = doJSON(t, "POST", s.URL+"/rules", key, `{"name":"r1","algorithm":"fixed_window","limit":5,"window":60}`); status == http.StatusCreated {
			break
		}
	}
	if status != http.StatusCreated {
		t.Fatalf("POST /rules after PostgreSQL came back: %d %v", status, body)
	}
}
