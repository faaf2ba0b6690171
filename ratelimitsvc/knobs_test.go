package ratelimitsvc_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/store"
)

// ask sends one request and returns the response.
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// wantCodes compares the overall code and the statuses, the rest ignored.
func wantCodes(t *testing.T, i int, got *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, sts ...*rlsv3.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	want := &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: sts}
	if diff := cmp.Diff(want, got, protocmp.Transform(),
		protocmp.IgnoreFields(&rlsv3.RateLimitResponse{}, "response_headers_to_add", "dynamic_metadata")); diff != "" {
		t.Fatalf("call %d: response mismatch (-want +got):\n%s", i, diff)
	}
}

// counter returns the value of the counter name with labels in reg (0 when
// there is none).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			if len(have) != len(labels) {
				continue
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func knobs(kv ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "knobs", Descriptors: kv}
}

// TestGlobalShadowMode: SHADOW_MODE decides and counts every descriptor and
// reports OVER_LIMIT statuses, but the overall code is always OK; each
// overridden answer is counted once. No request is refused, so a descriptor
// within its limit counts the request another is over for.
func TestGlobalShadowMode(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/test.yaml"), ShadowMode: true, Registerer: reg})
	test := func(ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: ds}
	}
	const global = "throttle_ratelimit_global_shadow_mode_total"

	resp := ask(t, c, test(desc("banned", "x"), desc("path", "/g")))
	wantCodes(t, 0, resp, OK, st(OVER, 0, MIN, "", 0, time.Minute), st(OK, 5, HOUR, "", 4, time.Hour))
	if resp.GetDynamicMetadata() != nil {
		t.Errorf("dynamic metadata without RESPONSE_DYNAMIC_METADATA: %v", resp.GetDynamicMetadata())
	}
	wantCodes(t, 1, ask(t, c, test(desc("path", "/g"))), OK, st(OK, 5, HOUR, "", 3, time.Hour))
	wantCodes(t, 2, ask(t, c, test(desc("tenant", "t1"))), OK, st(OK, 1, MIN, "tenant_limit", 0, time.Minute))
	wantCodes(t, 3, ask(t, c, test(desc("tenant", "t1"))), OK, st(OVER, 1, MIN, "tenant_limit", 0, time.Minute))
	// A rule's own shadow mode keeps its status OK: nothing for the global one to override.
	wantCodes(t, 4, ask(t, c, test(desc("shadow", "s"))), OK, st(OK, 1, MIN, "", 0, time.Minute))
	wantCodes(t, 5, ask(t, c, test(desc("shadow", "s"))), OK, st(OK, 1, MIN, "", 0, time.Minute))

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{global, nil, 2},
		{"throttle_ratelimit_over_limit_total", map[string]string{"domain": "test", "key": "banned"}, 1},
		{"throttle_ratelimit_over_limit_total", map[string]string{"domain": "test", "key": "tenant"}, 1},
		{"throttle_ratelimit_shadow_mode_total", map[string]string{"domain": "test", "key": "shadow"}, 1},
		{"throttle_ratelimit_shadow_mode_total", map[string]string{"domain": "test", "key": "tenant"}, 0},
		{"throttle_ratelimit_hits_total", map[string]string{"domain": "test", "key": "path"}, 2},
	} {
		if got := counter(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// TestQuotaMode: a quota_mode descriptor over its limit reports OVER_LIMIT
// but fails the request only when every quota descriptor of the request is
// over, or when a descriptor not in quota mode is over.
func TestQuotaMode(t *testing.T) {
	for name, lim := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			if _, ok := lim.(*redisstore.Store); ok {
				redisFlushDomains(t, "knobs")
			}
			c, _ := serve(t, ratelimitsvc.Options{Limiter: lim, Descriptors: loadConfig(t, "testdata/knobs.yaml")})
			svc1, svc2 := func() *rlcommon.RateLimitDescriptor { return desc("service", "service_1") }, func() *rlcommon.RateLimitDescriptor { return desc("service", "service_2") }

			wantCodes(t, 0, ask(t, c, knobs(svc1(), svc2())), OK, st(OK, 1, MIN, "", 0, time.Minute), st(OK, 2, MIN, "", 1, time.Minute))
			// service_1 is over, service_2 still has quota: OK, service_1 reported over.
			wantCodes(t, 1, ask(t, c, knobs(svc1(), svc2())), OK, st(OVER, 1, MIN, "", 0, time.Minute), st(OK, 2, MIN, "", 0, time.Minute))
			// Every quota over: OVER_LIMIT.
			wantCodes(t, 2, ask(t, c, knobs(svc1(), svc2())), OVER, st(OVER, 1, MIN, "", 0, time.Minute), st(OVER, 2, MIN, "", 0, time.Minute))
			// The only quota descriptor over, a plain limit within: every quota is over.
			wantCodes(t, 3, ask(t, c, knobs(svc1(), desc("plain", "p"))), OVER, st(OVER, 1, MIN, "", 0, time.Minute), st(OK, 5, MIN, "", 4, time.Minute))
			// A plain limit over fails the request even with quota left.
			wantCodes(t, 4, ask(t, c, knobs(desc("banned", "b"), desc("shadow_quota", "q"))), OVER, st(OVER, 0, MIN, "", 0, time.Minute), st(OK, 0, MIN, "", 0, time.Minute))
			// A shadow-mode quota never counts as over.
			wantCodes(t, 5, ask(t, c, knobs(desc("shadow_quota", "q"), desc("plain", "p"))), OK, st(OK, 0, MIN, "", 0, time.Minute), st(OK, 5, MIN, "", 3, time.Minute))
			wantCodes(t, 6, ask(t, c, knobs(svc1(), desc("shadow_quota", "q"))), OK, st(OVER, 1, MIN, "", 0, time.Minute), st(OK, 0, MIN, "", 0, time.Minute))
		})
	}
}

// TestDynamicMetadata: RESPONSE_DYNAMIC_METADATA returns the request's
// domain, descriptors and hits_addend, and the merged metadata of the
// descriptors that passed, as the reference service.
func TestDynamicMetadata(t *testing.T) {
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/knobs.yaml"), DynamicMetadata: true})
	req := knobs(desc("service", "service_1"), desc("service", "service_2"), desc("plain", "p"), desc("vip", "v"),
		withOverride(desc("plain", "x"), 10, typev3.RateLimitUnit_DAY), withHits(desc("user", "u1"), 2), desc("nothing", "n"))
	const descs = `[
		{"entries": ["service=service_1"]},
		{"entries": ["service=service_2"]},
		{"entries": ["plain=p"]},
		{"entries": ["vip=v"]},
		{"entries": ["plain=x"], "limit": "requests_per_unit:10 unit:DAY"},
		{"entries": ["user=u1"], "hitsAddend": 2},
		{"entries": ["nothing=n"]}]`
	for i, want := range []string{
		// Everything passed: the first metadata of a key wins, maps merge;
		// the unlimited vip's metadata is not returned (as upstream).
		`{"domain": "knobs", "descriptors": ` + descs + `,
		  "metadata": {"service_with_quota": {"name": "service_1", "zone": "a", "tier": "gold"}, "backup": true, "plain": "p"}}`,
		// service_1 is over its quota: its metadata is left out.
		`{"domain": "knobs", "descriptors": ` + descs + `, "hitsAddend": 1,
		  "metadata": {"service_with_quota": {"name": "service_2", "tier": "gold"}, "backup": true, "plain": "p"}}`,
	} {
		req.HitsAddend = uint32(i)
		got := ask(t, c, req).GetDynamicMetadata()
		w := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(want), w); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got, protocmp.Transform()); diff != "" {
			t.Errorf("call %d: dynamic metadata (-want +got):\n%s", i, diff)
		}
	}

	// No passed descriptor with metadata: no metadata field.
	got := ask(t, c, knobs(desc("banned", "b"))).GetDynamicMetadata()
	w := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(`{"domain": "knobs", "descriptors": [{"entries": ["banned=b"]}]}`), w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, got, protocmp.Transform()); diff != "" {
		t.Errorf("over limit: dynamic metadata (-want +got):\n%s", diff)
	}
}

// TestStatsKeys: the metric key is the reference's stats key without the
// domain (detailed_metric puts the value in; a limit's name does not), and
// keys holding request values are capped.
func TestStatsKeys(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/knobs.yaml"), MaxValueStatsKeys: 2, Registerer: reg})
	for _, d := range []*rlcommon.RateLimitDescriptor{
		desc("user", "u1"), desc("user", "u2"), desc("user", "u3"), desc("user", "u1"), desc("user", "u3"),
		desc("named", "n1"), desc("plain", "p"),
		withOverride(desc("plain", "x", "sub", "y"), 10, typev3.RateLimitUnit_DAY),
	} {
		ask(t, c, knobs(d))
	}
	const hits = "throttle_ratelimit_hits_total"
	for key, want := range map[string]float64{
		"user_u1": 2, "user_u2": 1, "user_u3": 0, "user": 2, // u3 came after the cap of 2
		"named": 1, "my_limit": 0, "plain": 1,
		"plain_x.sub_y": 0, "plain.sub": 1, // an override's stats key holds values too
	} {
		if got := counter(t, reg, hits, map[string]string{"domain": "knobs", "key": key}); got != want {
			t.Errorf("%s{key=%q} = %v, want %v", hits, key, got, want)
		}
	}
	if got := counter(t, reg, "throttle_ratelimit_stats_keys_folded_total", nil); got != 3 {
		t.Errorf("folded = %v, want 3", got)
	}

	// A negative cap keeps no value in the keys.
	reg = prometheus.NewRegistry()
	c, _ = serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/knobs.yaml"), MaxValueStatsKeys: -1, Registerer: reg})
	ask(t, c, knobs(desc("user", "u1")))
	if got := counter(t, reg, hits, map[string]string{"domain": "knobs", "key": "user"}); got != 1 {
		t.Errorf("no value keys: %s{key=user} = %v, want 1", hits, got)
	}
}

// TestConfigPending: with FORCE_START_WITHOUT_INITIAL_CONFIG the YAML may not
// have loaded yet; until it has, a request for a domain no REST client owns
// fails as the reference service's does, and a client's domain is served.
func TestConfigPending(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.CreateClient(ctx, store.Client{Name: "Shop Front", Email: "ops@shop.example", Domain: "shop-front"}, [32]byte{2}); err != nil {
		t.Fatal(err)
	}
	cache := store.NewCache(db, time.Hour, quietLog())
	if err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var cfg atomic.Pointer[descriptors.Config]
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: cfg.Load, Rules: cache})

	_, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("path", "/p")}})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "no rate limit configuration loaded" {
		t.Errorf("before the first load: err = %v, want Unavailable \"no rate limit configuration loaded\"", err)
	}
	mustCall(t, c, 0, call{domain: "shop-front", descs: []*rlcommon.RateLimitDescriptor{desc("path", "/p")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}})

	cfg.Store(loadConfig(t, "testdata/test.yaml")())
	mustCall(t, c, 1, call{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/p")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 4, time.Hour)}})
}
