package restapi

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/telemetry"
)

// OpenTelemetry tracing of the REST API (Deps.TracerProvider). With it:
//
//	POST /check                 server span, the caller's traceparent its parent
//	└── throttle.decide         the limiter's decision
//	    └── redis.check         the counter backend's call (package algorithms)
//
// The server span is named by the route pattern ("POST /check", "DELETE
// /rules/{name}"), never by the raw path, which may hold an identifier.
// The decision span carries the client id, algorithm, hits, allowed and
// degraded; never the identifier or the API key. Probes and scrapes (GET
// /health, /ready, /metrics) are not traced. Without a tracer provider none
// of this runs: the handler is the same as without tracing.

const tracerName = "github.com/throttle-rl/throttle/restapi"

// Attribute keys beside the decision span's shared ones (telemetry.Attr*).
const (
	attrClientID  = attribute.Key("throttle.client_id")
	attrRequestID = attribute.Key("throttle.request_id")
)

// tracing is the REST API's tracing; nil when it is off.
type tracing struct{ *telemetry.Tracing }

// newTracing returns nil when tp is nil or OpenTelemetry's no-op provider.
func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) *tracing {
	if t := telemetry.NewTracing(tp, prop, tracerName); t != nil {
		return &tracing{t}
	}
	return nil
}

// requests starts a server span per request, in the caller's trace when its
// headers carry one, and names it by the route once the mux has matched.
// It must wrap observe (which wraps the mux), so that the request it hands
// on is the one whose Pattern the mux sets.
func (tr *tracing) requests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health", "/ready", "/metrics":
			next.ServeHTTP(w, r)
			return
		}
		ctx := tr.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		method := methodLabel(r.Method)
		if method == "other" {
			method = "_OTHER" // semantic conventions' name for unknown methods
		}
		ctx, span := tr.Tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if st := stateFrom(ctx); st != nil && span.SpanContext().IsValid() {
			st.log = st.log.With("trace_id", span.SpanContext().TraceID().String())
		}
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		if !span.IsRecording() {
			return
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(
			semconv.HTTPRequestMethodKey.String(method),
			semconv.HTTPResponseStatusCode(status),
			attrRequestID.String(requestIDFrom(ctx)),
		)
		if r.Pattern != "" {
			route := r.Pattern
			if _, path, ok := strings.Cut(route, " "); ok {
				route = path
			}
			span.SetName(method + " " + route)
			span.SetAttributes(semconv.HTTPRoute(route))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// decisions returns limiter with a "throttle.decide" span around each
// Check, or limiter itself when tracing is off.
func (tr *tracing) decisions(limiter algorithms.Store) algorithms.Store {
	if tr == nil {
		return limiter
	}
	return &tracedLimiter{Store: limiter, tracer: tr.Tracer}
}

// tracedLimiter is a Store whose Check makes the decision span.
type tracedLimiter struct {
	algorithms.Store
	tracer trace.Tracer
}

func (l *tracedLimiter) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	ctx, span, ok := telemetry.StartDecision(ctx, l.tracer, "rest")
	if !ok {
		return l.Store.Check(ctx, reqs)
	}
	defer span.End()
	ds, err := l.Store.Check(ctx, reqs)
	var hits int64
	for _, r := range reqs {
		hits += r.Hits
	}
	span.SetAttributes(attrClientID.String(clientFrom(ctx).ID), telemetry.AttrHits.Int64(hits))
	if len(reqs) == 1 {
		span.SetAttributes(telemetry.AttrAlgorithm.String(string(reqs[0].Limit.Algorithm)))
	}
	if err != nil {
		telemetry.Fail(span, err)
		return ds, err
	}
	allowed, degraded := true, false
	for _, d := range ds {
		allowed = allowed && d.Allowed
		degraded = degraded || d.Degraded
	}
	span.SetAttributes(telemetry.AttrAllowed.Bool(allowed), telemetry.AttrDegraded.Bool(degraded))
	return ds, err
}
