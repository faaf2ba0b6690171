package telemetry

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestTracerOnlyWhenTracing(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		if tr := Tracer(tp, "x"); tr != nil {
			t.Errorf("Tracer(%T) = %T, want nil (no spans)", tp, tr)
		}
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(t.Context())
	if Tracer(tp, "x") == nil {
		t.Error("Tracer(an SDK provider) = nil, want a tracer")
	}
}
