// Package telemetry is what the front doors (restapi, ratelimitsvc) and
// cmd/throttle share of OpenTelemetry: when a tracer provider makes spans at
// all, and the attributes of a decision span, the same on REST and gRPC.
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracer returns tp's tracer called name, or nil when tp does not trace
// (nil, or OpenTelemetry's no-op provider): nil means no span is ever
// started, and nothing is spent on tracing.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(name)
}

// The attributes of a decision span (throttle.decide), the same on REST and
// gRPC.
const (
	AttrAPI       = attribute.Key("throttle.api")
	AttrAlgorithm = attribute.Key("throttle.algorithm")
	AttrHits      = attribute.Key("throttle.hits")
	AttrAllowed   = attribute.Key("throttle.allowed")
	AttrDegraded  = attribute.Key("throttle.degraded")
)

// Tracing is a front door's tracer provider, propagator and tracer; a nil
// *Tracing means tracing is off.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	Tracer     trace.Tracer
}

// NewTracing returns the tracing of tp with the tracer called name, or nil
// when tp does not trace (Tracer). prop defaults to W3C Trace Context.
func NewTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator, name string) *Tracing {
	tracer := Tracer(tp, name)
	if tracer == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracing{Provider: tp, Propagator: prop, Tracer: tracer}
}

// StartDecision starts the decision span (throttle.decide) of a request
// whose server span in ctx is recording, with the API it came through; ok
// is false, and nothing started, when no span records.
func StartDecision(ctx context.Context, tracer trace.Tracer, api string) (context.Context, trace.Span, bool) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil, false
	}
	ctx, span := tracer.Start(ctx, "throttle.decide")
	span.SetAttributes(AttrAPI.String(api))
	return ctx, span, true
}

// Fail marks span as failed with err.
func Fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
