package otlp

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestNoEndpointNoProvider(t *testing.T) {
	tp, err := NewTracerProvider(context.Background(), Options{Protocol: ProtocolGRPC, ServiceName: "x"})
	if tp != nil || err != nil {
		t.Fatalf("NewTracerProvider without an endpoint = %v, %v; want nil, nil (tracing off)", tp, err)
	}
}

// export is one OTLP/HTTP request a receiver got.
type export struct {
	header http.Header
	req    *collectortrace.ExportTraceServiceRequest
}

// receiver is an OTLP/HTTP receiver of gzip-compressed traces at /v1/traces.
func receiver(t *testing.T) (string, <-chan export) {
	t.Helper()
	got := make(chan export, 10)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("%s %s, Content-Encoding %q; want /v1/traces, gzip", r.Method, r.URL.Path, r.Header.Get("Content-Encoding"))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		b, err := io.ReadAll(zr)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if err != nil {
			t.Error(err)
			return
		}
		got <- export{r.Header.Clone(), req}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(s.Close)
	return s.URL + "/v1/traces", got
}

// TestExportHTTP: a span reaches the receiver with the headers given, the
// service's name and version and the resource attributes given, under the
// sampler named.
func TestExportHTTP(t *testing.T) {
	url, got := receiver(t)
	ctx := context.Background()
	tp, err := NewTracerProvider(ctx, Options{
		Endpoint: url, Protocol: ProtocolHTTP, Headers: map[string]string{"api-key": "k"},
		ServiceName: "throttle", ServiceVersion: "v1.2.3", Resource: []attribute.KeyValue{attribute.String("deployment.environment.name", "prod")},
		Sampler: "always_on",
	})
	if err != nil || tp == nil {
		t.Fatalf("NewTracerProvider = %v, %v", tp, err)
	}
	defer tp.Shutdown(ctx)
	_, span := tp.Tracer("test").Start(ctx, "throttle.decide")
	span.End()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	e := <-got
	if e.header.Get("api-key") != "k" {
		t.Errorf("api-key header %q, want k", e.header.Get("api-key"))
	}
	rs := e.req.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
		t.Fatalf("resource spans %v, want one span", rs)
	}
	if name := rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(); name != "throttle.decide" {
		t.Errorf("span %q, want throttle.decide", name)
	}
	attrs := map[string]string{}
	for _, kv := range rs[0].GetResource().GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	for k, want := range map[string]string{"service.name": "throttle", "service.version": "v1.2.3", "deployment.environment.name": "prod", "telemetry.sdk.language": "go"} {
		if attrs[k] != want {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
}

func TestSampler(t *testing.T) {
	for name, want := range map[string]string{
		"always_on":                "AlwaysOnSampler",
		"always_off":               "AlwaysOffSampler",
		"traceidratio":             "TraceIDRatioBased{0.25}",
		"parentbased_always_off":   "ParentBased{root:AlwaysOffSampler,",
		"parentbased_traceidratio": "ParentBased{root:TraceIDRatioBased{0.25},",
		"":                         "ParentBased{root:AlwaysOnSampler,",
	} {
		if got := Sampler(name, 0.25).Description(); len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("Sampler(%q) = %s, want %s…", name, got, want)
		}
	}
}
