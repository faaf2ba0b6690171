package restapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit"
)

// The caller's trace context, as a REST caller sends it.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func TestTracingSpans(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		e := newEnv(t, b, func(d *Deps) {
			d.TracerProvider = tp
			if b.limiter == "redis" {
				d.Limiter = redisstore.New(redisClient(t), redisstore.Options{Now: testClock, HoldSweepEvery: -1, Tracer: tp.Tracer("github.com/throttle-rl/throttle/algorithms")})
			}
		})
		c := e.register(t, "traced")
		identifier := "secret-user-" + testkit.RandomHex(t, 4)
		r := e.call(t, "POST", "/check", c.Key, `{"identifier":"`+identifier+`","limit":5,"window":60,"algorithm":"fixed_window","hits":3}`,
			"traceparent", callerParent, "tracestate", "vendor=opaque")
		if r.status != http.StatusOK {
			t.Fatalf("check: %d %s", r.status, r.body)
		}
		bad := e.call(t, "POST", "/check", c.Key, `{"limit":5}`, "traceparent", callerParent)
		e.call(t, "GET", "/health", "", "", "traceparent", callerParent)
		e.call(t, "GET", "/metrics", "", "", "traceparent", callerParent)
		tp.ForceFlush(context.Background())

		var inCaller []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() == callerTrace {
				inCaller = append(inCaller, s)
			}
		}
		type node struct{ name, parent string }
		var got []node
		names := map[trace.SpanID]string{}
		for _, s := range inCaller {
			names[s.SpanContext().SpanID()] = s.Name()
		}
		for _, s := range inCaller {
			parent := names[s.Parent().SpanID()]
			if s.Parent().SpanID().String() == callerSpan {
				parent = "caller"
			}
			got = append(got, node{s.Name(), parent})
		}
		want := []node{{"throttle.decide", "POST /check"}, {"POST /check", "caller"}, {"POST /check", "caller"}}
		if b.limiter == "redis" {
			want = append([]node{{"redis.check", "throttle.decide"}}, want...)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(node{})); diff != "" {
			t.Fatalf("spans in the caller's trace, in the order they ended (-want +got):\n%s", diff)
		}
		i := len(want) - 3
		decide, server, badServer := inCaller[i], inCaller[i+1], inCaller[i+2]
		if !server.Parent().IsRemote() || server.SpanKind() != trace.SpanKindServer {
			t.Errorf("server span: remote parent %v, kind %v; want a remote parent, kind server", server.Parent().IsRemote(), server.SpanKind())
		}
		if ts := server.SpanContext().TraceState().String(); ts != "vendor=opaque" {
			t.Errorf("tracestate = %q, want the caller's vendor=opaque", ts)
		}
		if diff := cmp.Diff(map[string]any{
			"http.request.method": "POST", "http.route": "/check", "http.response.status_code": int64(200),
			"throttle.request_id": r.header.Get("X-Request-ID"),
		}, spanAttrs(server)); diff != "" {
			t.Errorf("server span attributes (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]any{
			"throttle.api": "rest", "throttle.client_id": c.ID, "throttle.algorithm": "fixed_window",
			"throttle.hits": int64(3), "throttle.allowed": true, "throttle.degraded": false,
		}, spanAttrs(decide)); diff != "" {
			t.Errorf("decision span attributes (-want +got):\n%s", diff)
		}
		if got := spanAttrs(badServer)["http.response.status_code"]; got != int64(bad.status) || bad.status != 400 {
			t.Errorf("bad request: span status code %v, reply %d; want 400 both", got, bad.status)
		}
		if st := badServer.Status(); st.Code != codes.Unset {
			t.Errorf("a 400's server span status = %v, want unset (the caller's fault)", st)
		}

		// Nothing of the identifier or the key in any span; no probe traced.
		for _, s := range rec.Ended() {
			if strings.HasPrefix(s.Name(), "GET /health") || strings.HasPrefix(s.Name(), "GET /metrics") {
				t.Errorf("probe traced: %s", s.Name())
			}
			for _, kv := range s.Attributes() {
				if v := kv.Value.Emit(); strings.Contains(v, identifier) || strings.Contains(v, c.Key) {
					t.Errorf("span %s attribute %s = %q holds the identifier or the API key", s.Name(), kv.Key, v)
				}
			}
		}
		if !strings.Contains(e.logs.String(), `"trace_id":"`+callerTrace+`"`) {
			t.Errorf("the request's log lines lack its trace_id")
		}
	})
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
			if tr := newTracing(tp, nil); tr != nil {
				t.Fatalf("newTracing(%T) = %+v, want nil", tp, tr)
			}
			spy := &spyLimiter{Store: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: testClock})}
			e := newEnv(t, backend{"sqlite+memory", "sqlite", "memory"}, func(d *Deps) { d.TracerProvider, d.Limiter = tp, spy })
			c := e.register(t, "untraced")
			r := e.call(t, "POST", "/check", c.Key, `{"identifier":"u","limit":5,"window":60}`, "traceparent", callerParent)
			if r.status != http.StatusOK {
				t.Fatalf("check: %d %s", r.status, r.body)
			}
			if len(spy.seen) != 2 { // the /register limit, then the check
				t.Fatalf("limiter called %d times, want 2", len(spy.seen))
			}
			for _, sc := range spy.seen {
				if sc.IsValid() {
					t.Errorf("the limiter saw trace context %v with tracing off: the caller's traceparent was read", sc)
				}
			}
			if strings.Contains(e.logs.String(), "trace_id") {
				t.Error("logs carry a trace_id with tracing off")
			}
		})
	}
}
