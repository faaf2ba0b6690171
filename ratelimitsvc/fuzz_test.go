package ratelimitsvc_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	"unicode/utf8"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/inputsize"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// fuzzServer is a Server over the memory store and testdata/test.yaml, for
// the fuzz targets (no listener: the decoders are what is fuzzed).
func fuzzServer(f *testing.F) *ratelimitsvc.Server {
	f.Helper()
	cfg, err := descriptors.LoadFiles(descriptors.Options{}, "testdata/test.yaml")
	if err != nil {
		f.Fatal(err)
	}
	s, err := ratelimitsvc.New(ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}),
		Descriptors: func() *descriptors.Config { return cfg }, Log: quietLog()})
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// fuzzSeeds are real requests: what Envoy sends (one descriptor of a few
// entries, hits_addend, a limit override), and ones at and past the caps.
func fuzzSeeds() []*rlsv3.RateLimitRequest {
	long := string(bytes.Repeat([]byte("v"), 1025))
	override := withOverride(desc("ip", "10.0.0.1"), 5, typev3.RateLimitUnit_MINUTE)
	override.Limit.UnitMultiplier = wrapperspb.UInt32(3)
	return []*rlsv3.RateLimitRequest{
		{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "user_id", "u1")}},
		{Domain: "test", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.1.2.3"), withHits(desc("path", "/files/a"), 2)}},
		{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{override}},
		{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{withOverride(desc("a", "1"), 1, typev3.RateLimitUnit_YEAR)}},
		{Domain: "nope", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "zz\nINJECTED.x:1|c")}},
		{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("path", long)}},
		{Domain: "", Descriptors: []*rlcommon.RateLimitDescriptor{{}}},
	}
}

// checkDecided fails when a request the service decided is past a cap of
// inputsize, or when it was refused with anything but INVALID_ARGUMENT (the
// caller's mistake).
func checkDecided(t *testing.T, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, err error) {
	t.Helper()
	if err != nil {
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("refused with %v, want INVALID_ARGUMENT", err)
		}
		return
	}
	if len(req.GetDomain()) > inputsize.MaxString || len(req.GetDescriptors()) > inputsize.DefaultDescriptors {
		t.Fatalf("decided a request of a %d-byte domain, %d descriptors", len(req.GetDomain()), len(req.GetDescriptors()))
	}
	for i, d := range req.GetDescriptors() {
		n := 0
		for _, e := range d.GetEntries() {
			if len(e.GetKey()) > inputsize.MaxString || len(e.GetValue()) > inputsize.MaxString {
				t.Fatalf("decided descriptor %d with an entry of %d and %d bytes", i, len(e.GetKey()), len(e.GetValue()))
			}
			n += len(e.GetKey()) + len(e.GetValue())
		}
		if len(d.GetEntries()) > inputsize.DefaultEntries || n > inputsize.MaxDescriptorBytes {
			t.Fatalf("decided descriptor %d of %d entries, %d bytes", i, len(d.GetEntries()), n)
		}
	}
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
}

// FuzzShouldRateLimit: a RateLimitRequest as gRPC decodes it from the wire,
// turned into descriptors, checked and decided: nothing panics, a refusal is
// INVALID_ARGUMENT, and what is decided is within inputsize's caps.
func FuzzShouldRateLimit(f *testing.F) {
	s := fuzzServer(f)
	for _, req := range fuzzSeeds() {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if err := proto.Unmarshal(wire, &req); err != nil {
			return // gRPC refuses it before the service sees it
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := s.ShouldRateLimit(ctx, &req)
		checkDecided(t, &req, resp, err)
	})
}

// FuzzJSON: a POST /json body, decoded from protojson and decided: nothing
// panics, the status is 200, 429 or 400 (413 past 1 MiB), never a 5xx, a
// refusal is short UTF-8 text, and what is decided is within inputsize's
// caps.
func FuzzJSON(f *testing.F) {
	s := fuzzServer(f)
	h := s.JSONHandler(ratelimitsvc.JSONAccess{})
	for _, req := range fuzzSeeds() {
		b, err := protojson.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"domain": "test", "descriptors": [{"entries": [{"key": "path", "value": "/"}]}]}`))
	f.Add([]byte(`{"domain": 3}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json") // (POST /json takes no other)
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests:
			var req rlsv3.RateLimitRequest
			if err := protojson.Unmarshal(body, &req); err != nil {
				t.Fatalf("%d for a body that is no request: %v", w.Code, err)
			}
			var resp rlsv3.RateLimitResponse
			if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatalf("reply is no RateLimitResponse: %v", err)
			}
			checkDecided(t, &req, &resp, nil)
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if !utf8.Valid(w.Body.Bytes()) || w.Body.Len() > 1024 {
				t.Fatalf("%d reply is not short UTF-8 text: %q", w.Code, w.Body.Bytes())
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
		}
	})
}
