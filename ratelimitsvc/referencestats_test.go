package ratelimitsvc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// refRecorder is a ReferenceStats that keeps what it is told.
type refRecorder struct {
	mu       sync.Mutex
	counts   map[string]uint64 // "domain|key|stat"
	lookups  map[string]int    // DescriptorCounter calls, by "domain|key|stat"
	notFound map[string]int
	redis    int
	service  int
	shadow   int
	calls    map[string]int
}

func newRefRecorder() *refRecorder {
	return &refRecorder{counts: map[string]uint64{}, lookups: map[string]int{}, notFound: map[string]int{}, calls: map[string]int{}}
}

type refCounter struct {
	r    *refRecorder
	name string
}

func (c refCounter) Add(n uint64) {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.counts[c.name] += n
}

func (r *refRecorder) DescriptorCounter(domain, key, stat string) interface{ Add(uint64) } {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := domain + "|" + key + "|" + stat
	r.lookups[name]++
	return refCounter{r, name}
}

func (r *refRecorder) DomainNotFound(domain string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notFound[domain] += n
}

func (r *refRecorder) RedisError()       { r.inc(&r.redis) }
func (r *refRecorder) ServiceError()     { r.inc(&r.service) }
func (r *refRecorder) GlobalShadowMode() { r.inc(&r.shadow) }

func (r *refRecorder) inc(n *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*n++
}

func (r *refRecorder) UnaryCall(fullMethod string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[fullMethod]++
}

// errs returns the redis_error, service_error and global_shadow_mode counts.
func (r *refRecorder) errs() (redis, service, shadow int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.redis, r.service, r.shadow
}

func (r *refRecorder) snapshot() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

const basicConfig = "../descriptors/testdata/test/config/basic_config.yaml"

// TestReferenceStatsKeys: the reference's per-descriptor stats, by its
// stats keys (the reference's test/config/config_test.go: detailed_metric
// puts the value in), each counter looked up once; domain_not_found per
// descriptor; service errors; every call of the gRPC server.
func TestReferenceStatsKeys(t *testing.T) {
	ref := newRefRecorder()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, basicConfig), ReferenceStats: ref})
	for _, d := range []*rlcommon.RateLimitDescriptor{
		desc("key1", "value1", "subkey1", "something"),
		desc("key1", "value1", "subkey1", "subvalue1"),
		desc("key2", "something"), desc("key2", "something"), desc("key2", "something"),
		desc("key2", "value2"),
		desc("key3", "foo"), desc("key3", "foo"), // 1 per hour: near, then over
		desc("key6", "foo"), // unlimited: no stats
		desc("key7", "unspecified_value"), desc("key7", "another_value"),
	} {
		if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlcommon.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "foo_domain",
		Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b"), desc("c", "d")}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "test-domain"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no descriptors: %v, want InvalidArgument", err)
	}

	k := func(key, stat string) string { return "test-domain|" + key + "|" + stat }
	want := map[string]uint64{
		k("key1_value1.subkey1", "total_hits"): 1, k("key1_value1.subkey1", "within_limit"): 1,
		k("key1_value1.subkey1_subvalue1", "total_hits"): 1, k("key1_value1.subkey1_subvalue1", "within_limit"): 1,
		k("key2", "total_hits"): 3, k("key2", "within_limit"): 3,
		k("key2_value2", "total_hits"): 1, k("key2_value2", "within_limit"): 1,
		k("key3", "total_hits"): 2, k("key3", "near_limit"): 1, k("key3", "within_limit"): 1, k("key3", "over_limit"): 1,
		k("key7_unspecified_value", "total_hits"): 1, k("key7_unspecified_value", "within_limit"): 1,
		k("key7_another_value", "total_hits"): 1, k("key7_another_value", "within_limit"): 1,
	}
	if diff := cmp.Diff(want, ref.snapshot()); diff != "" {
		t.Errorf("descriptor stats (-want +got):\n%s", diff)
	}
	for name, n := range ref.lookups {
		if n != 1 {
			t.Errorf("DescriptorCounter(%s) called %d times, want once", name, n)
		}
	}
	if diff := cmp.Diff(map[string]int{"foo_domain": 2}, ref.notFound); diff != "" {
		t.Errorf("domain_not_found (-want +got):\n%s", diff)
	}
	if redis, service, _ := ref.errs(); service != 1 || redis != 0 {
		t.Errorf("service_error %d, redis_error %d; want 1, 0", service, redis)
	}
	ref.mu.Lock()
	defer ref.mu.Unlock()
	if got := ref.calls["/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"]; got != 13 {
		t.Errorf("ShouldRateLimit calls: %d, want 13", got)
	}
}

// TestReferenceStatsCapped: the per-value keys of detailed_metric are capped
// as the metrics' keys are: beyond the cap, a value counts under the key
// without it.
func TestReferenceStatsCapped(t *testing.T) {
	ref := newRefRecorder()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, basicConfig), MaxValueStatsKeys: 2, ReferenceStats: ref})
	for i := range 5 {
		ask(t, c, &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlcommon.RateLimitDescriptor{desc("key7", fmt.Sprint("v", i))}})
	}
	want := map[string]uint64{
		"test-domain|key7_v0|total_hits": 1, "test-domain|key7_v0|within_limit": 1,
		"test-domain|key7_v1|total_hits": 1, "test-domain|key7_v1|within_limit": 1,
		"test-domain|key7|total_hits": 3, "test-domain|key7|within_limit": 3,
	}
	if diff := cmp.Diff(want, ref.snapshot()); diff != "" {
		t.Errorf("descriptor stats (-want +got):\n%s", diff)
	}
}

// TestReferenceStatsShadowMode: SHADOW_MODE's overridden answers.
func TestReferenceStatsShadowMode(t *testing.T) {
	ref := newRefRecorder()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, basicConfig), ShadowMode: true, ReferenceStats: ref})
	for range 3 {
		ask(t, c, &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlcommon.RateLimitDescriptor{desc("key3", "foo")}})
	}
	if _, _, shadow := ref.errs(); shadow != 2 {
		t.Errorf("global_shadow_mode: %d, want 2", shadow)
	}
}

// failingStore is an engine whose every decision fails with err.
type failingStore struct {
	algorithms.Store
	err error
}

func (f failingStore) Check(context.Context, []algorithms.Request) ([]algorithms.Decision, error) {
	return nil, f.err
}

// TestReferenceStatsErrors: an engine's failure counts as redis_error, an
// invalid request as service_error.
func TestReferenceStatsErrors(t *testing.T) {
	for _, tt := range []struct {
		name           string
		err            error
		redis, service int
	}{
		{"backend", errors.New("connection refused"), 1, 0},
		{"overloaded", algorithms.ErrOverloaded, 1, 0},
		{"invalid", fmt.Errorf("request 0: %w", algorithms.ErrInvalid), 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ref := newRefRecorder()
			c, _ := serve(t, ratelimitsvc.Options{Limiter: failingStore{algorithms.NewMemoryStore(algorithms.MemoryOptions{}), tt.err},
				Descriptors: loadConfig(t, basicConfig), ReferenceStats: ref})
			if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "test-domain",
				Descriptors: []*rlcommon.RateLimitDescriptor{desc("key2", "x")}}); err == nil {
				t.Fatal("no error")
			}
			if redis, service, _ := ref.errs(); redis != tt.redis || service != tt.service {
				t.Errorf("redis_error %d, service_error %d; want %d, %d", redis, service, tt.redis, tt.service)
			}
		})
	}
}

// TestReferenceStatsFailureMode: a decision FAILURE_MODE made because Redis
// is down counts as redis_error, once per call.
func TestReferenceStatsFailureMode(t *testing.T) {
	srv := redistest.Start(t)
	g, err := redisstore.NewGuard(redisstore.New(redistest.NewClient(t, srv.URL()), redisstore.Options{}),
		redisstore.GuardOptions{Mode: algorithms.FailOpen, Timeout: 200 * time.Millisecond, BreakerMinCalls: 1, OpenFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ref := newRefRecorder()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: g, Descriptors: loadConfig(t, basicConfig), ReferenceStats: ref})
	two := &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlcommon.RateLimitDescriptor{desc("key2", "a"), desc("key3", "b")}}
	ask(t, c, two)
	if redis, _, _ := ref.errs(); redis != 0 {
		t.Fatalf("Redis up: redis_error %d, want 0", redis)
	}
	srv.Stop()
	for range 3 {
		ask(t, c, two)
	}
	if redis, _, _ := ref.errs(); redis != 3 {
		t.Errorf("Redis down, 3 calls of 2 descriptors: redis_error %d, want 3", redis)
	}
}
