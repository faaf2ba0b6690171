package ratelimitsvc_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// t0 is aligned to every unit the tests use (second … hour).
var t0 = time.Unix(1_700_002_800, 0)

func quietLog() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// serve starts the service on a real loopback listener and returns a client
// made from the generated Envoy stubs.
func serve(t *testing.T, opts ratelimitsvc.Options) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	_, c, conn := serveServer(t, opts)
	return c, conn
}

// serveServer is serve, also returning the Server.
func serveServer(t *testing.T, opts ratelimitsvc.Options) (*ratelimitsvc.Server, rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	if opts.Log == nil {
		opts.Log = quietLog()
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0 }
	}
	s, err := ratelimitsvc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := ratelimitsvc.NewGRPCServer(s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn), conn
}

func loadConfig(t *testing.T, files ...string) func() *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.LoadFiles(descriptors.Options{}, files...)
	if err != nil {
		t.Fatal(err)
	}
	return func() *descriptors.Config { return cfg }
}

// desc builds a request descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withOverride(d *rlcommon.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// st is an expected DescriptorStatus; rpu < 0 means no current_limit.
func st(code rlsv3.RateLimitResponse_Code, rpu int, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: remaining}
	if rpu >= 0 {
		s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(rpu), Unit: unit, Name: name}
		s.DurationUntilReset = durationpb.New(reset)
	}
	return s
}

// none is the status of a descriptor no limit applies to.
var none = st(OK, -1, 0, "", 0, 0)

const (
	SEC  = rlsv3.RateLimitResponse_RateLimit_SECOND
	MIN  = rlsv3.RateLimitResponse_RateLimit_MINUTE
	HOUR = rlsv3.RateLimitResponse_RateLimit_HOUR
)

type call struct {
	domain string
	hits   uint32
	descs  []*rlcommon.RateLimitDescriptor
	want   []*rlsv3.RateLimitResponse_DescriptorStatus
}

func mustCall(t *testing.T, c rlsv3.RateLimitServiceClient, i int, k call) *rlsv3.RateLimitResponse {
	t.Helper()
	domain := k.domain
	if domain == "" {
		domain = "test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: k.descs, HitsAddend: k.hits})
	if err != nil {
		t.Fatalf("call %d: %v", i, err)
	}
	wantOverall := OK
	for _, s := range k.want {
		if s.Code == OVER {
			wantOverall = OVER
		}
	}
	want := &rlsv3.RateLimitResponse{OverallCode: wantOverall, Statuses: k.want}
	if diff := cmp.Diff(want, resp, protocmp.Transform(), protocmp.IgnoreFields(&rlsv3.RateLimitResponse{}, "response_headers_to_add")); diff != "" {
		t.Fatalf("call %d: response mismatch (-want +got):\n%s", i, diff)
	}
	return resp
}

var cases = []struct {
	name  string
	calls []call
}{
	{"nested: parent 3/min, child 2/min per user", []call{
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 3, MIN, "", 2, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u1")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 2, MIN, "", 1, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u1")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 2, MIN, "", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u1")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 2, MIN, "", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u2")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 2, MIN, "", 1, time.Minute)}},
		// Deeper than the configuration, or an unknown value: no limit.
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u1", "x", "y")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("generic_key", "web")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}},
	}},
	{"wildcard, exact whitelist, key-only default", []call{
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/files/a")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, HOUR, "", 0, time.Hour)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/files/b")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, HOUR, "", 0, time.Hour)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/files/a")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 1, HOUR, "", 0, time.Hour)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/open")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/other")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 4, time.Hour)}},
	}},
	{"unlimited, shadow mode, ban", []call{
		{descs: []*rlcommon.RateLimitDescriptor{desc("vip", "x")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, -1, 0, "", 4294967295, 0)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("shadow", "x")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, MIN, "", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("shadow", "x")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, MIN, "", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("banned", "x")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 0, MIN, "", 0, time.Minute)}},
	}},
	{"hits_addend per request and per descriptor", []call{
		{hits: 2, descs: []*rlcommon.RateLimitDescriptor{desc("path", "/h")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 3, time.Hour)}},
		{hits: 2, descs: []*rlcommon.RateLimitDescriptor{withHits(desc("path", "/h"), 0)}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 3, time.Hour)}},
		{descs: []*rlcommon.RateLimitDescriptor{withHits(desc("path", "/h"), 4)}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 5, HOUR, "", 3, time.Hour)}},
		{descs: []*rlcommon.RateLimitDescriptor{withHits(desc("path", "/h"), 3)}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 0, time.Hour)}},
	}},
	{"limit override wins", []call{
		{descs: []*rlcommon.RateLimitDescriptor{withOverride(desc("path", "/o"), 1, typev3.RateLimitUnit_DAY)}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, rlsv3.RateLimitResponse_RateLimit_DAY, "", 0, 24*time.Hour-t0Offset(24*time.Hour))}},
		{descs: []*rlcommon.RateLimitDescriptor{withOverride(desc("path", "/o"), 1, typev3.RateLimitUnit_DAY)}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 1, rlsv3.RateLimitResponse_RateLimit_DAY, "", 0, 24*time.Hour-t0Offset(24*time.Hour))}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/o")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 4, time.Hour)}},
		{domain: "unknown", descs: []*rlcommon.RateLimitDescriptor{withOverride(desc("path", "/o"), 1, typev3.RateLimitUnit_DAY)}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}},
	}},
	{"unknown domain, several descriptors with one over", []call{
		{domain: "nope", descs: []*rlcommon.RateLimitDescriptor{desc("path", "/x")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}},
		// The ban rejects the request: path consumes nothing.
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/m"), desc("banned", "x"), desc("nothing", "x")},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 5, time.Hour), st(OVER, 0, MIN, "", 0, time.Minute), none}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/m")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 4, time.Hour)}},
		// Over by its hits: a read of what remains says so.
		{descs: []*rlcommon.RateLimitDescriptor{withHits(desc("path", "/m"), 5), desc("banned", "x")},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 5, HOUR, "", 4, time.Hour), st(OVER, 0, MIN, "", 0, time.Minute)}},
	}},
	{"replaces drops the replaced limit", []call{
		{descs: []*rlcommon.RateLimitDescriptor{desc("tenant", "t1"), desc("premium", "t1")},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{none, st(OK, 5, MIN, "premium_limit", 4, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("tenant", "t1")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, MIN, "tenant_limit", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("tenant", "t1")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 1, MIN, "tenant_limit", 0, time.Minute)}},
	}},
	{"each algorithm behind a descriptor", []call{
		// gcra, 2 per minute: TAT 30 s ahead per hit.
		{descs: []*rlcommon.RateLimitDescriptor{desc("sliding", "s"), desc("bucket", "b"), desc("cell", "c")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 2, MIN, "", 1, time.Minute), st(OK, 2, MIN, "", 1, 1000*time.Second), st(OK, 2, MIN, "", 1, 30*time.Second)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("sliding", "s"), desc("bucket", "b"), desc("cell", "c")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 2, MIN, "", 0, time.Minute), st(OK, 2, MIN, "", 0, 2000*time.Second), st(OK, 2, MIN, "", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("sliding", "s"), desc("bucket", "b"), desc("cell", "c")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 2, MIN, "", 0, time.Minute), st(OVER, 2, MIN, "", 0, 2000*time.Second), st(OVER, 2, MIN, "", 0, time.Minute)}},
	}},
	{"(a, b_c) and (a_b, c) do not share a counter", []call{
		{descs: []*rlcommon.RateLimitDescriptor{desc("a", "b_c")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, MIN, "", 0, time.Minute)}},
		{descs: []*rlcommon.RateLimitDescriptor{desc("a_b", "c")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 1, MIN, "", 0, time.Minute)}},
	}},
}

func t0Offset(w time.Duration) time.Duration { return time.Duration(t0.UnixNano()) % w }

// limiters are the two engine stores, both on the fixed clock t0.
func limiters(t *testing.T) map[string]algorithms.Store {
	now := func() time.Time { return t0 }
	return map[string]algorithms.Store{
		"memory": algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: now}),
		"redis":  redisstore.New(redistest.NewClient(t, redistest.SharedURL(t)), redisstore.Options{Now: now}),
	}
}

func TestShouldRateLimit(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for name, lim := range limiters(t) {
				t.Run(name, func(t *testing.T) {
					// A fresh Redis scope per run: flush what earlier runs counted.
					if _, ok := lim.(*redisstore.Store); ok {
						redisFlush(t)
					}
					c, _ := serve(t, ratelimitsvc.Options{Limiter: lim, Descriptors: loadConfig(t, "testdata/test.yaml")})
					for i, k := range tc.calls {
						mustCall(t, c, i, k)
					}
				})
			}
		})
	}
}

// redisFlush empties the shared test Redis's keys of domain "test": every
// subtest starts from no state.
func redisFlush(t *testing.T) {
	t.Helper()
	redisFlushDomains(t, "test")
}

// redisFlushDomains deletes the shared test Redis's keys of the domains.
func redisFlushDomains(t *testing.T, domains ...string) {
	t.Helper()
	rdb := redistest.NewClient(t, redistest.SharedURL(t))
	ctx := context.Background()
	for _, d := range domains {
		iter := rdb.Scan(ctx, 0, "throttle:{domain/"+d+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}), Descriptors: loadConfig(t, "testdata/test.yaml")})
	cases := []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}}, "rate limit domain must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "test"}, "rate limit descriptor list must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b"), {}}}, "descriptor 1 has no entries"},
		{&rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b", "", "x")}}, "descriptor 0 entry 1 has an empty key"},
	}
	for _, tc := range cases {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
			t.Errorf("%v: err = %v, want InvalidArgument %q", tc.req, err, tc.want)
		}
	}
}

func TestHealthAndHeaders(t *testing.T) {
	c, conn := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/test.yaml"), ResponseHeaders: true})
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", h, err)
	}
	resp := mustCall(t, c, 0, call{descs: []*rlcommon.RateLimitDescriptor{desc("path", "/h"), desc("generic_key", "api")},
		want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, HOUR, "", 4, time.Hour), st(OK, 3, MIN, "", 2, time.Minute)}})
	want := []*corev3.HeaderValue{
		{Key: "X-RateLimit-Limit", Value: "3, 3;w=60"},
		{Key: "X-RateLimit-Remaining", Value: "2"},
		{Key: "X-RateLimit-Reset", Value: "60"},
		{Key: "RateLimit-Policy", Value: `"path";q=5;w=3600, "generic_key_api";q=3;w=60`},
		{Key: "RateLimit", Value: `"path";r=4;t=3600, "generic_key_api";r=2;t=60`},
	}
	if diff := cmp.Diff(want, resp.GetResponseHeadersToAdd(), protocmp.Transform()); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "reload.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: reload\ndescriptors:\n  - key: block\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	r, err := descriptors.NewReloader(dir, time.Hour, descriptors.Options{}, quietLog(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}), Descriptors: r.Current})
	reload := call{domain: "reload", descs: []*rlcommon.RateLimitDescriptor{desc("block", "foo")}}

	reload.want = []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 5, SEC, "", 4, time.Second)}
	mustCall(t, c, 0, reload)

	write("domain: reload\ndescriptors:\n  - key: block\n    rate_limit: {unit: second, requests_per_unit: 0}\n")
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("good edit: Reload() = %v, %v; want true, nil", changed, err)
	}
	reload.want = []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 0, SEC, "", 0, time.Second)}
	mustCall(t, c, 1, reload)

	write("domain: reload\ndescriptors:\n  - key: block\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if changed, err := r.Reload(); changed || err == nil {
		t.Fatalf("bad edit: Reload() = %v, %v; want false and an error", changed, err)
	}
	mustCall(t, c, 2, reload) // the last good config still answers

	if err := os.Remove(filepath.Join(dir, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	reload.want = []*rlsv3.RateLimitResponse_DescriptorStatus{none}
	mustCall(t, c, 3, reload)
}
