package ratelimitsvc_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/algorithms/redisstore/overlimit"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

const shouldRateLimit = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// withTraceparent is ctx with Envoy's W3C trace context in the call's
// metadata: trace id n, parent span id n.
func withTraceparent(ctx context.Context, n int) (context.Context, string, string) {
	traceID, spanID := fmt.Sprintf("%032x", 0xabc0+n), fmt.Sprintf("%016x", 0xdef0+n)
	return metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+spanID+"-01"), traceID, spanID
}

func TestTracingSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	redisStore := redisstore.New(redistest.NewClient(t, redistest.SharedURL(t)), redisstore.Options{Tracer: tp.Tracer("github.com/throttle-rl/throttle/algorithms")})
	cache, err := overlimit.New(redisStore, overlimit.Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	client, conn := serve(t, ratelimitsvc.Options{
		Limiter: cache, Descriptors: loadConfig(t, "testdata/test.yaml"), TracerProvider: tp, Now: time.Now,
	})
	b := make([]byte, 8)
	rand.Read(b)
	secret := "/files/secret-" + hex.EncodeToString(b)

	// A health check: not traced.
	hctx, _, _ := withTraceparent(context.Background(), 0)
	if _, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	calls := []struct {
		descs   []*rlcommon.RateLimitDescriptor
		want    rlsv3.RateLimitResponse_Code
		attrs   map[string]any
		backend bool // a redis.check under the decision
	}{
		{[]*rlcommon.RateLimitDescriptor{desc("path", secret), desc("vip", "x")}, OK, map[string]any{
			"throttle.api": "envoy", "throttle.domain": "test", "throttle.descriptors": int64(2), "throttle.decided": int64(1),
			"throttle.algorithm": "fixed_window", "throttle.hits": int64(1), "throttle.allowed": true, "throttle.over_limit": int64(0),
			"throttle.cached": int64(0), "throttle.degraded": false,
		}, true},
		{[]*rlcommon.RateLimitDescriptor{desc("path", secret)}, OVER, map[string]any{
			"throttle.api": "envoy", "throttle.domain": "test", "throttle.descriptors": int64(1), "throttle.decided": int64(1),
			"throttle.algorithm": "fixed_window", "throttle.hits": int64(1), "throttle.allowed": false, "throttle.over_limit": int64(1),
			"throttle.cached": int64(0), "throttle.degraded": false,
		}, true},
		// Redis has just rejected it: the over-limit cache answers.
		{[]*rlcommon.RateLimitDescriptor{desc("path", secret)}, OVER, map[string]any{
			"throttle.api": "envoy", "throttle.domain": "test", "throttle.descriptors": int64(1), "throttle.decided": int64(1),
			"throttle.algorithm": "fixed_window", "throttle.hits": int64(1), "throttle.allowed": false, "throttle.over_limit": int64(1),
			"throttle.cached": int64(1), "throttle.degraded": false,
		}, false},
		// A ban rejects the request without the engine: the other
		// descriptor is only read (0 hits), which the cache cannot answer.
		{[]*rlcommon.RateLimitDescriptor{desc("path", secret), desc("banned", "x")}, OVER, map[string]any{
			"throttle.api": "envoy", "throttle.domain": "test", "throttle.descriptors": int64(2), "throttle.decided": int64(1),
			"throttle.algorithm": "fixed_window", "throttle.hits": int64(0), "throttle.allowed": false, "throttle.over_limit": int64(2),
			"throttle.cached": int64(0), "throttle.degraded": false,
		}, true},
	}
	for i, c := range calls {
		ctx, traceID, parentID := withTraceparent(context.Background(), i+1)
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: c.descs})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.GetOverallCode() != c.want {
			t.Fatalf("call %d: overall %v, want %v", i, resp.GetOverallCode(), c.want)
		}
		want := []string{"throttle.decide", shouldRateLimit}
		if c.backend {
			want = append([]string{"redis.check"}, want...)
		}
		byName := map[string]sdktrace.ReadOnlySpan{}
		var names []string
		// The server span ends once the answer is sent: wait for it.
		for deadline := time.Now().Add(5 * time.Second); len(names) < len(want) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			clear(byName)
			names = names[:0]
			for _, s := range rec.Ended() {
				if s.SpanContext().TraceID().String() == traceID {
					byName[s.Name()] = s
					names = append(names, s.Name())
				}
			}
		}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Fatalf("call %d: spans of its trace (-want +got):\n%s", i, diff)
		}
		server, decide := byName[shouldRateLimit], byName["throttle.decide"]
		if server.Parent().SpanID().String() != parentID || !server.Parent().IsRemote() || server.SpanKind() != trace.SpanKindServer {
			t.Errorf("call %d: server span parent %v (remote %v), kind %v; want Envoy's %s, server",
				i, server.Parent().SpanID(), server.Parent().IsRemote(), server.SpanKind(), parentID)
		}
		if decide.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("call %d: decision span's parent is not the server span", i)
		}
		if diff := cmp.Diff(c.attrs, spanAttrs(decide)); diff != "" {
			t.Errorf("call %d: decision attributes (-want +got):\n%s", i, diff)
		}
		if r, ok := byName["redis.check"]; ok && r.Parent().SpanID() != decide.SpanContext().SpanID() {
			t.Errorf("call %d: redis.check's parent is not the decision span", i)
		}
		if st := server.Status().Code; st != codes.Unset {
			t.Errorf("call %d: server span status %v, want unset", i, st)
		}
	}
	for _, s := range rec.Ended() {
		if strings.Contains(s.Name(), "Health") {
			t.Errorf("health check traced: %s", s.Name())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), "secret-") {
				t.Errorf("span %s attribute %s = %q holds a descriptor value", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
	}
}

func TestTracingErrorStatus(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	client, _ := serve(t, ratelimitsvc.Options{
		Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}), TracerProvider: tp,
		Descriptors: func() *descriptors.Config { return nil },
	})
	ctx, traceID, _ := withTraceparent(context.Background(), 99)
	if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}}); err == nil {
		t.Fatal("a domain before the configuration loaded was answered")
	}
	var decide sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() == traceID && s.Name() == "throttle.decide" {
			decide = s
		}
	}
	if decide == nil {
		t.Fatal("no decision span")
	}
	if st := decide.Status(); st.Code != codes.Error || !strings.Contains(st.Description, "no rate limit configuration loaded") {
		t.Errorf("decision span status = %+v, want Error naming the cause", st)
	}
}

// spyLimiter notes the trace context each Check sees.
type spyLimiter struct {
	algorithms.Store
	seen []trace.SpanContext
}

func (s *spyLimiter) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	return s.Store.Check(ctx, reqs)
}

func TestTracingOff(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		t.Run(fmt.Sprintf("%T", tp), func(t *testing.T) {
			spy := &spyLimiter{Store: algorithms.NewMemoryStore(algorithms.MemoryOptions{})}
			client, _ := serve(t, ratelimitsvc.Options{Limiter: spy, Descriptors: loadConfig(t, "testdata/test.yaml"), TracerProvider: tp})
			ctx, _, _ := withTraceparent(context.Background(), 7)
			if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api")}}); err != nil {
				t.Fatal(err)
			}
			if len(spy.seen) != 1 || spy.seen[0].IsValid() {
				t.Errorf("the limiter saw trace contexts %v; want one call, none valid: with tracing off Envoy's traceparent is not even read", spy.seen)
			}
		})
	}
}
