package ratelimitsvc_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// manyDescriptors is a request of n descriptors a=1, each 10 bytes on the
// wire: 100,000 of them fit the server's 1 MiB message limit.
func manyDescriptors(n int) *rlsv3.RateLimitRequest {
	ds := make([]*rlcommon.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("a", "1")
	}
	return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: ds}
}

// manyEntries is a request of one descriptor of n entries.
func manyEntries(n int) *rlsv3.RateLimitRequest {
	kv := make([]string, 0, 2*n)
	for range n {
		kv = append(kv, "a", "1")
	}
	return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc(kv...)}}
}

// TestOversizedRequestsRefused: a request over MAX_DESCRIPTORS_PER_REQUEST
// or MAX_DESCRIPTOR_ENTRIES is refused with INVALID_ARGUMENT naming the cap
// and its setting, before anything is counted, and counted in
// throttle_ratelimit_oversized_requests_total; the service keeps answering
// other calls while such requests arrive.
func TestOversizedRequestsRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/test.yaml"), Registerer: reg})
	refused := func(req *rlsv3.RateLimitRequest, want string) bool {
		t.Helper()
		// Generous: under -race a 1 MB message takes seconds to encode
		// and decode.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
			t.Errorf("%d descriptors: got %v, %v; want InvalidArgument %q", len(req.GetDescriptors()), resp, err, want)
			return false
		}
		return true
	}

	// Requests of 100,000 descriptors a=1 (limit 1 per minute), and one
	// of 100,000 entries, while other calls are served.
	const oversizedCalls = 2
	descriptors100k, entries100k := manyDescriptors(100_000), manyEntries(100_000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range oversizedCalls {
			if !refused(descriptors100k, "rate limit request has 100000 descriptors, more than the 64 allowed (MAX_DESCRIPTORS_PER_REQUEST)") {
				return
			}
		}
		refused(entries100k, "descriptor 0 has 100000 entries, more than the 32 allowed (MAX_DESCRIPTOR_ENTRIES)")
	}()
	served := 0
	for running := true; running || served < 20; served++ {
		select {
		case <-done:
			running = false
		default:
		}
		// Each path value has 5 per hour: the first call of each is OK
		// with 4 left.
		resp := ask(t, c, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("path", "/p"+strconv.Itoa(served))}})
		wantCodes(t, served, resp, OK, st(OK, 5, HOUR, "", 4, time.Hour-t0Offset(time.Hour)))
	}
	t.Logf("%d other calls answered while the oversized requests were sent", served)
	if t.Failed() {
		t.FailNow()
	}

	// Nothing was counted: a=1 still has its one request of the minute.
	a := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1")}}
	wantCodes(t, 0, ask(t, c, a), OK, st(OK, 1, MIN, "", 0, time.Minute-t0Offset(time.Minute)))
	wantCodes(t, 1, ask(t, c, a), OVER, st(OVER, 1, MIN, "", 0, time.Minute-t0Offset(time.Minute)))
	if got := counter(t, reg, "throttle_ratelimit_hits_total", map[string]string{"domain": "test", "key": "a"}); got != 2 {
		t.Errorf("hits of a = %v, want 2 (the two calls after the refused ones)", got)
	}
	for reason, want := range map[string]float64{"descriptors": oversizedCalls, "entries": 1} {
		if got := counter(t, reg, "throttle_ratelimit_oversized_requests_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("oversized{reason=%s} = %v, want %v", reason, got, want)
		}
	}

	// At the caps, a request is decided (the 32 entries match no limit).
	resp := ask(t, c, manyDescriptors(64))
	if len(resp.GetStatuses()) != 64 || resp.GetOverallCode() != OVER {
		t.Errorf("64 descriptors: %d statuses, %v; want 64, OVER_LIMIT", len(resp.GetStatuses()), resp.GetOverallCode())
	}
	wantCodes(t, 0, ask(t, c, manyEntries(32)), OK, none)
	refused(manyDescriptors(65), "rate limit request has 65 descriptors, more than the 64 allowed (MAX_DESCRIPTORS_PER_REQUEST)")
	refused(manyEntries(33), "descriptor 0 has 33 entries, more than the 32 allowed (MAX_DESCRIPTOR_ENTRIES)")

	// Caps of one's own; a descriptor past the first is checked too.
	c, _ = serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}),
		Descriptors: loadConfig(t, "testdata/test.yaml"), MaxDescriptors: 2, MaxDescriptorEntries: 1})
	refused(manyDescriptors(3), "rate limit request has 3 descriptors, more than the 2 allowed (MAX_DESCRIPTORS_PER_REQUEST)")
	refused(&rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1"), desc("generic_key", "api", "user_id", "u")}},
		"descriptor 1 has 2 entries, more than the 1 allowed (MAX_DESCRIPTOR_ENTRIES)")
}

// BenchmarkRefuseOversized: the time to answer a request of 100,000
// descriptors (1 MB) through a real gRPC listener, the client's encoding,
// the transfer and the server's decoding included: refused by the default
// cap, and, for comparison, decided in full (in memory) as before the cap.
func BenchmarkRefuseOversized(b *testing.B) {
	cfg, err := descriptorsForBench()
	if err != nil {
		b.Fatal(err)
	}
	req := manyDescriptors(100_000)
	for _, bc := range []struct {
		name string
		max  int
		want codes.Code
	}{
		{"refused", 0, codes.InvalidArgument},
		{"decided_without_cap", len(req.GetDescriptors()), codes.OK},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := serveBench(b, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}), Descriptors: cfg, MaxDescriptors: bc.max})
			for b.Loop() {
				if _, err := c.ShouldRateLimit(context.Background(), req, grpc.MaxCallRecvMsgSize(16<<20)); status.Code(err) != bc.want {
					b.Fatalf("err = %v, want %v", err, bc.want)
				}
			}
		})
	}
}

// TestOversizedPartsRefused: a domain, key or value over 1024 bytes, a
// descriptor whose keys and values pass 4096 bytes, or a limit override's
// window past MAX_OVERRIDE_WINDOW (30 days by default: a YEAR is refused)
// is refused INVALID_ARGUMENT naming the part, on gRPC and on POST /json
// alike (400 with the same message), before anything is counted or named
// in a metric; at the caps, a request is decided.
func TestOversizedPartsRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, c, _ := serveServer(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/test.yaml"), Registerer: reg})
	web := httptest.NewServer(s.JSONHandler(ratelimitsvc.JSONAccess{}))
	t.Cleanup(web.Close)
	big := strings.Repeat("v", 512<<10)
	k1025 := strings.Repeat("k", 1025)
	one := func(d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	}
	fiveValues := desc("path", strings.Repeat("a", 1000), "b", strings.Repeat("b", 1000), "c", strings.Repeat("c", 1000),
		"d", strings.Repeat("d", 1000), "e", strings.Repeat("e", 1000))
	for _, tt := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"value", one(desc("path", big)), "descriptor 0 entry 0 value is 524288 bytes, longer than the 1024 allowed"},
		{"key", &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1"), desc("path", "/", k1025, "x")}},
			"descriptor 1 entry 1 key is 1025 bytes, longer than the 1024 allowed"},
		{"domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 1025), Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1")}},
			"domain is 1025 bytes, longer than the 1024 allowed"},
		{"descriptor bytes", one(fiveValues), "descriptor 0 has 5008 bytes of keys and values, more than the 4096 allowed"},
		{"override year", one(withOverride(desc("a", "1"), 1, typev3.RateLimitUnit_YEAR)),
			"descriptor 0 limit override: a window of 365 days, longer than the 30 days allowed (MAX_OVERRIDE_WINDOW)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tt.want {
				t.Errorf("gRPC: %v, want InvalidArgument %q", err, tt.want)
			}
			body, err := protojson.Marshal(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			r, err := http.Post(web.URL, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusBadRequest || strings.TrimSpace(string(got)) != tt.want {
				t.Errorf("POST /json: %d %q, want 400 %q", r.StatusCode, got, tt.want)
			}
		})
	}
	for reason, want := range map[string]float64{"string": 6, "descriptor_bytes": 2, "override_window": 2, "descriptors": 0} {
		if got := counter(t, reg, "throttle_ratelimit_oversized_requests_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("oversized{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	// Nothing was counted nor named: a=1 has its one request of the minute,
	// and no metric names a refused value.
	a := one(desc("a", "1"))
	wantCodes(t, 0, ask(t, c, a), OK, st(OK, 1, MIN, "", 0, time.Minute-t0Offset(time.Minute)))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if len(lp.GetValue()) > 1024 {
					t.Errorf("%s has a label of %d bytes", mf.GetName(), len(lp.GetValue()))
				}
			}
		}
	}

	// At the caps: values of 1024 bytes, 4096 bytes in all, a MONTH.
	atCap := desc("x", strings.Repeat("x", 1024), "b", strings.Repeat("b", 1023), "c", strings.Repeat("c", 1023), "d", strings.Repeat("d", 1022))
	wantCodes(t, 1, ask(t, c, one(atCap)), OK, none)
	wantCodes(t, 2, ask(t, c, one(withOverride(desc("m", "1"), 1, typev3.RateLimitUnit_MONTH))), OK,
		st(OK, 1, rlsv3.RateLimitResponse_RateLimit_MONTH, "", 0, 30*24*time.Hour-t0Offset(30*24*time.Hour)))
}

// TestMetricKeyLabelBounded: a detailed_metric key holding a value of 1024
// bytes (the most a value may have) is a key label of at most 256 bytes,
// cut and ended by a hash: two such values stay two series.
func TestMetricKeyLabelBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/knobs.yaml"), Registerer: reg})
	for _, v := range []string{strings.Repeat("u", 1023) + "1", strings.Repeat("u", 1023) + "2"} {
		ask(t, c, &rlsv3.RateLimitRequest{Domain: "knobs", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", v)}})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "throttle_ratelimit_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "key" {
					keys[lp.GetValue()] = true
					if n := len(lp.GetValue()); n > 256 {
						t.Errorf("key label of %d bytes, want at most 256", n)
					}
				}
			}
		}
	}
	if len(keys) != 2 {
		t.Errorf("%d key labels, want 2: %v", len(keys), keys)
	}
}
