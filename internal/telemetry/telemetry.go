// Package telemetry is what the front doors (restapi, ratelimitsvc) and
// cmd/throttle share of OpenTelemetry: when a tracer provider makes spans at
// all, and the attributes of a decision span, the same on REST and gRPC.
package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
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
