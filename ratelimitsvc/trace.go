package ratelimitsvc

import (
	"context"
	"slices"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/telemetry"
)

// OpenTelemetry tracing of the service (Options.TracerProvider). With it:
//
//	envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
//	│                           server span (otelgrpc), Envoy's traceparent its parent
//	└── throttle.decide         the whole decision of the request
//	    └── redis.check         the counter backend's call (package algorithms)
//
// Envoy sends W3C trace context in the call's metadata when its tracing is
// on (the OpenTelemetry tracer). The decision span carries the domain, the
// number of descriptors and of the engine requests made for them (one per
// limit of each descriptor), their algorithms
// and hits, whether the answer was OK, how many descriptors were over the
// limit, answered by the over-limit cache, or degraded (FAILURE_MODE); never
// a descriptor value. gRPC health and reflection calls are not traced.
// Without a tracer provider none of this runs: the server is built exactly
// as without tracing.

const tracerName = "github.com/throttle-rl/throttle/ratelimitsvc"

// Attribute keys of the decision span beside the shared ones
// (telemetry.Attr*).
const (
	attrDomain      = attribute.Key("throttle.domain")
	attrDescriptors = attribute.Key("throttle.descriptors")
	attrDecided     = attribute.Key("throttle.decided")
	attrOverLimit   = attribute.Key("throttle.over_limit")
	attrCached      = attribute.Key("throttle.cached")
)

// tracing is the service's tracing; nil when it is off.
type tracing struct{ *telemetry.Tracing }

// newTracing returns nil when tp is nil or OpenTelemetry's no-op provider.
func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) *tracing {
	if t := telemetry.NewTracing(tp, prop, tracerName); t != nil {
		return &tracing{t}
	}
	return nil
}

// statsHandler makes the server span of every call but health checks and
// reflection. Its metrics go nowhere: Prometheus has the service's.
func (tr *tracing) statsHandler() stats.Handler {
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tr.Provider),
		otelgrpc.WithPropagators(tr.Propagator),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.None(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection."))),
	)
}

// tracedServer is the service with a decision span around each request.
type tracedServer struct {
	*Server
	tracer trace.Tracer
}

func (t *tracedServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, span, ok := telemetry.StartDecision(ctx, t.tracer, "envoy")
	if !ok {
		return t.Server.ShouldRateLimit(ctx, req)
	}
	defer span.End()
	// What the engine decided, noteDecisions sets; these hold when it
	// decided nothing.
	span.SetAttributes(
		attrDomain.String(req.GetDomain()),
		attrDescriptors.Int(len(req.GetDescriptors())),
		attrDecided.Int(0),
		telemetry.AttrAlgorithm.String(""),
		telemetry.AttrHits.Int64(0),
		attrCached.Int(0),
		telemetry.AttrDegraded.Bool(false),
	)
	resp, err := t.Server.ShouldRateLimit(ctx, req)
	if err != nil {
		telemetry.Fail(span, err)
		return resp, err
	}
	over := 0
	for _, st := range resp.GetStatuses() {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	span.SetAttributes(telemetry.AttrAllowed.Bool(resp.GetOverallCode() == rlsv3.RateLimitResponse_OK), attrOverLimit.Int(over))
	return resp, nil
}

// noteDecisions puts what the engine decided for a request on its
// decision span (throttle.decide), when one is recording.
func noteDecisions(ctx context.Context, reqs []algorithms.Request, ds []algorithms.Decision) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var algs []string
	var hits int64
	for _, r := range reqs {
		hits += r.Hits
		if a := string(r.Limit.Algorithm); !slices.Contains(algs, a) {
			algs = append(algs, a)
		}
	}
	cached, degraded := 0, false
	for _, d := range ds {
		if d.Cached {
			cached++
		}
		degraded = degraded || d.Degraded
	}
	span.SetAttributes(attrDecided.Int(len(reqs)), telemetry.AttrAlgorithm.String(strings.Join(algs, ",")),
		telemetry.AttrHits.Int64(hits), attrCached.Int(cached), telemetry.AttrDegraded.Bool(degraded))
}
