package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the exporter sends gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/throttle-rl/throttle/internal/telemetry/otlp"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

func TestTracingSettings(t *testing.T) {
	for _, tt := range []struct {
		name     string
		env      map[string]string
		endpoint string
		protocol string
		err      string
	}{
		{name: "off by default", env: nil, endpoint: "", protocol: "http/protobuf"},
		{name: "base URL gets the traces path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, endpoint: "http://collector:4318/v1/traces", protocol: "http/protobuf"},
		{name: "base URL with a path and slash", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com/api/"}, endpoint: "https://otlp.example.com/api/v1/traces", protocol: "http/protobuf"},
		{name: "grpc takes the URL as it is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, endpoint: "http://collector:4317", protocol: "grpc"},
		{name: "traces endpoint wins and is used as it is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:9999/custom"}, endpoint: "http://traces:9999/custom", protocol: "http/protobuf"},
		{name: "traces endpoint alone turns tracing on", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318"}, endpoint: "http://traces:4318", protocol: "http/protobuf"},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, endpoint: "http://collector:4317", protocol: "grpc"},
		{name: "no scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}, err: `OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4317" is not a URL`},
		{name: "unknown protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" is not grpc or http/protobuf`},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, err: `OTEL_TRACES_SAMPLER: "jaeger_remote" is not one of`},
		{name: "ratio out of range", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, err: `OTEL_TRACES_SAMPLER_ARG: "1.5" is not a ratio between 0 and 1`},
		{name: "bad headers", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key"}, err: `OTEL_EXPORTER_OTLP_HEADERS: "xxxxx" is not key=value`}, // (its value never shown: a header may hold a token)
		{name: "bad resource attributes", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=%zz"}, err: `OTEL_RESOURCE_ATTRIBUTES: the value of "a" is not percent-encoded`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Tracing.Endpoint != tt.endpoint || c.Tracing.Protocol != tt.protocol {
				t.Errorf("endpoint %q, protocol %q; want %q, %q", c.Tracing.Endpoint, c.Tracing.Protocol, tt.endpoint, tt.protocol)
			}
		})
	}

	c, err := parseServe(nil, env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:pw@otlp.example.com", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b%2Cc , x-team=edge",
		"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"api-key": "a b,c", "x-team": "edge"}, c.Tracing.Headers); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if got := c.Tracing.String(); got != "http/protobuf https://otlp.example.com/v1/traces" {
		t.Errorf("String() = %q: the log line must name the endpoint without its password", got)
	}
	if c.Tracing.ServiceName != "throttle" || c.Tracing.SamplerArg != 0.25 || len(c.Tracing.Resource) != 1 || c.Tracing.Resource[0].Value.AsString() != "prod" {
		t.Errorf("tracing = %+v", c.Tracing)
	}
	if got := otlp.Sampler(c.Tracing.Sampler, c.Tracing.SamplerArg).Description(); got != "ParentBased{root:TraceIDRatioBased{0.25},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}" {
		t.Errorf("sampler = %s", got)
	}
}

// TestNoEndpointTracingOff: without an endpoint tracing is off (and
// package otlp makes no provider: its TestNoEndpointNoProvider).
func TestNoEndpointTracingOff(t *testing.T) {
	c, err := parseServe(nil, env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "x"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Endpoint != "" || c.Tracing.String() != "off" {
		t.Errorf("String() = %q, want off", c.Tracing.String())
	}
}

// span is one received span, flattened with its resource and scope.
type span struct {
	resource map[string]any
	scope    string
	*tracepb.Span
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	}
	return v.String()
}

func kvs(attrs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range attrs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

// receiver collects what OTLP exporters send it, over gRPC or HTTP.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []span
	headers []map[string]string // per request: the headers the test looks at
}

func (r *receiver) add(req *collectortrace.ExportTraceServiceRequest, headers map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, headers)
	for _, rs := range req.GetResourceSpans() {
		res := kvs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, span{res, ss.GetScope().GetName(), s})
			}
		}
	}
}

func (r *receiver) received() ([]span, []map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans...), append([]map[string]string(nil), r.headers...)
}

// Export is the OTLP/gRPC collector's trace service.
func (r *receiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for _, k := range []string{"authorization", "content-type"} {
		h[k] = strings.Join(md.Get(k), ",")
	}
	r.add(req, h)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startGRPCReceiver serves the OTLP trace service on a loopback port and
// returns its URL.
func startGRPCReceiver(t *testing.T, r *receiver) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return "http://" + lis.Addr().String()
}

// startHTTPReceiver serves OTLP/HTTP (binary protobuf) at /v1/traces and
// returns its base URL.
func startHTTPReceiver(t *testing.T, r *receiver) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "OTLP traces are POST /v1/traces", http.StatusNotFound)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		var msg collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(data, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg, map[string]string{
			"authorization": req.Header.Get("Authorization"), "content-encoding": req.Header.Get("Content-Encoding"),
			"content-type": req.Header.Get("Content-Type"),
		})
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The callers' trace contexts: a REST app and Envoy.
const (
	restTrace, restParent   = "11111111111111111111111111111111", "1111111111111111"
	envoyTrace, envoyParent = "22222222222222222222222222222222", "2222222222222222"
)

// TestOTLPExport runs the built binary against an in-process OTLP receiver,
// over each protocol, with Redis: a REST /check and an Envoy
// ShouldRateLimit, each with a W3C traceparent, must reach the receiver as
// spans of the caller's trace, under the caller's span, with the decision
// and the backend call inside, flushed by SIGTERM.
func TestOTLPExport(t *testing.T) {
	descDir := t.TempDir()
	data, err := os.ReadFile("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(descDir, "edge.yaml"), data, 0o644)

	for _, tt := range []struct {
		protocol string
		start    func(*testing.T, *receiver) string
		headers  map[string]string // what the receiver must have seen on every request
	}{
		{"grpc", startGRPCReceiver, map[string]string{"authorization": "Bearer s3cret", "content-type": "application/grpc"}},
		{"http/protobuf", startHTTPReceiver, map[string]string{"authorization": "Bearer s3cret", "content-encoding": "gzip", "content-type": "application/x-protobuf"}},
	} {
		t.Run(strings.ReplaceAll(tt.protocol, "/", "-"), func(t *testing.T) {
			rcv := &receiver{}
			endpoint := tt.start(t, rcv)
			// Keys of its own in the shared Redis: a run after others
			// (go test -count=2) finds no register limit spent.
			s := throttletest.Start(t,
				"REDIS_URL="+redistest.SharedURL(t), "CACHE_KEY_PREFIX=otlp_"+testkit.RandomHex(t, 4)+"_", "BACKEND_TIMEOUT=2s", "DESCRIPTORS_DIR="+descDir,
				"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL="+tt.protocol,
				"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20s3cret",
				"OTEL_SERVICE_NAME=throttle-e2e", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test",
			)
			_, _, reg := doJSON(t, "POST", s.URL+"/register", "", `{"name":"traced app","email":"traced@example.com"}`)
			key, _ := reg["api_key"].(string)
			clientID, _ := reg["client_id"].(string)
			user := "user-" + strconv.FormatInt(time.Now().UnixNano(), 36)

			req, _ := http.NewRequest("POST", s.URL+"/check", strings.NewReader(`{"identifier":"`+user+`","limit":2,"window":3600,"algorithm":"fixed_window"}`))
			req.Header.Set("X-API-Key", key)
			req.Header.Set("X-Request-ID", "req-traced-1")
			req.Header.Set("traceparent", "00-"+restTrace+"-"+restParent+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("check: %d", resp.StatusCode)
			}

			conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+envoyTrace+"-"+envoyParent+"-01")
			rl, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "api"}, {Key: "user_id", Value: user}}}}})
			if err != nil || rl.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("ShouldRateLimit: %v %v", rl, err)
			}

			// SIGTERM flushes the spans of the drained requests.
			s.Stop(t, 30*time.Second)
			spans, headers := rcv.received()
			if len(headers) == 0 {
				t.Fatalf("the receiver got no export request\n%s", s.Logs.String())
			}
			for i, h := range headers {
				if diff := cmp.Diff(tt.headers, h); diff != "" {
					t.Errorf("export request %d headers (-want +got):\n%s", i, diff)
				}
			}

			byTrace := map[string][]span{}
			for _, sp := range spans {
				id := hex.EncodeToString(sp.GetTraceId())
				byTrace[id] = append(byTrace[id], sp)
				if diff := cmp.Diff(map[string]any{
					"service.name": "throttle-e2e", "service.version": "dev", "deployment.environment.name": "test",
					"telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": "go", "telemetry.sdk.version": sp.resource["telemetry.sdk.version"],
				}, sp.resource); diff != "" {
					t.Errorf("span %s: resource (-want +got):\n%s", sp.GetName(), diff)
				}
				for k, v := range kvs(sp.GetAttributes()) {
					if s, ok := v.(string); ok && (strings.Contains(s, user) || strings.Contains(s, key)) {
						t.Errorf("span %s attribute %s = %q holds the identifier or the API key", sp.GetName(), k, s)
					}
				}
			}

			coalescedCheck := map[string]any{
				"db.system.name": "redis", "throttle.batch.size": int64(1), "throttle.coalesced": true,
				"throttle.coalesced.size": int64(1), "throttle.coalesced.callers": int64(1),
			}
			batch := map[string]any{"db.system.name": "redis", "throttle.batch.size": int64(1), "throttle.coalesced.callers": int64(1)}
			checkTree(t, "REST", byTrace[restTrace], restParent, []want{
				{"POST /check", "caller", tracepb.Span_SPAN_KIND_SERVER, "github.com/throttle-rl/throttle/restapi", map[string]any{
					"http.request.method": "POST", "http.route": "/check", "http.response.status_code": int64(200), "throttle.request_id": "req-traced-1",
				}},
				{"throttle.decide", "POST /check", tracepb.Span_SPAN_KIND_INTERNAL, "github.com/throttle-rl/throttle/restapi", map[string]any{
					"throttle.api": "rest", "throttle.client_id": clientID, "throttle.algorithm": "fixed_window",
					"throttle.hits": int64(1), "throttle.allowed": true, "throttle.degraded": false,
				}},
				{"redis.check", "throttle.decide", tracepb.Span_SPAN_KIND_INTERNAL, "github.com/throttle-rl/throttle/algorithms", coalescedCheck},
				{"redis.batch", "redis.check", tracepb.Span_SPAN_KIND_CLIENT, "github.com/throttle-rl/throttle/algorithms", batch},
			})
			const rpc = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
			checkTree(t, "Envoy", byTrace[envoyTrace], envoyParent, []want{
				{rpc, "caller", tracepb.Span_SPAN_KIND_SERVER, "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc", nil},
				{"throttle.decide", rpc, tracepb.Span_SPAN_KIND_INTERNAL, "github.com/throttle-rl/throttle/ratelimitsvc", map[string]any{
					"throttle.api": "envoy", "throttle.domain": "edge", "throttle.descriptors": int64(1), "throttle.decided": int64(1),
					"throttle.algorithm": "fixed_window", "throttle.hits": int64(1), "throttle.allowed": true, "throttle.over_limit": int64(0),
					"throttle.cached": int64(0), "throttle.degraded": false,
				}},
				{"redis.check", "throttle.decide", tracepb.Span_SPAN_KIND_INTERNAL, "github.com/throttle-rl/throttle/algorithms", coalescedCheck},
				{"redis.batch", "redis.check", tracepb.Span_SPAN_KIND_CLIENT, "github.com/throttle-rl/throttle/algorithms", batch},
			})
			for _, sp := range byTrace[envoyTrace] {
				if sp.GetName() == rpc {
					a := kvs(sp.GetAttributes())
					if a["rpc.system.name"] != "grpc" || a["rpc.method"] != rpc {
						t.Errorf("gRPC server span attributes = %v, want rpc.system.name grpc, rpc.method %s", a, rpc)
					}
				}
			}
		})
	}
}

// want is one expected span of a trace: its name, its parent's name
// ("caller" for the caller's span), kind, instrumentation scope and
// attributes (nil: not compared).
type want struct {
	name, parent string
	kind         tracepb.Span_SpanKind
	scope        string
	attrs        map[string]any
}

// checkTree compares the spans of one trace with wants, exactly.
func checkTree(t *testing.T, what string, spans []span, callerSpan string, wants []want) {
	t.Helper()
	if len(spans) != len(wants) {
		var names []string
		for _, s := range spans {
			names = append(names, s.GetName())
		}
		t.Errorf("%s trace: %d spans %v, want %d", what, len(spans), names, len(wants))
		return
	}
	byID := map[string]span{}
	for _, s := range spans {
		byID[hex.EncodeToString(s.GetSpanId())] = s
	}
	for _, w := range wants {
		var got *span
		for i, s := range spans {
			parent := "caller"
			if p, ok := byID[hex.EncodeToString(s.GetParentSpanId())]; ok {
				parent = p.GetName()
			} else if hex.EncodeToString(s.GetParentSpanId()) != callerSpan {
				parent = "unknown span " + hex.EncodeToString(s.GetParentSpanId())
			}
			if s.GetName() == w.name && parent == w.parent {
				got = &spans[i]
			}
		}
		if got == nil {
			t.Errorf("%s trace: no span %q under %q", what, w.name, w.parent)
			continue
		}
		if got.GetKind() != w.kind || got.scope != w.scope {
			t.Errorf("%s trace: %s kind %v scope %q, want %v %q", what, w.name, got.GetKind(), got.scope, w.kind, w.scope)
		}
		if st := got.GetStatus().GetCode(); st != tracepb.Status_STATUS_CODE_UNSET {
			t.Errorf("%s trace: %s status %v, want unset", what, w.name, st)
		}
		if w.attrs != nil {
			if diff := cmp.Diff(w.attrs, kvs(got.GetAttributes())); diff != "" {
				t.Errorf("%s trace: %s attributes (-want +got):\n%s", what, w.name, diff)
			}
		}
	}
}

// TestTracingOffExportsNothing: without an endpoint the binary makes no
// exporter, whatever else of OpenTelemetry is set, and says so.
func TestTracingOffExportsNothing(t *testing.T) {
	s := throttletest.Start(t, "LOG_LEVEL=info", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_SERVICE_NAME=unused", "OTEL_TRACES_SAMPLER=always_on")
	req, _ := http.NewRequest("GET", s.URL+"/health", nil)
	req.Header.Set("traceparent", "00-"+restTrace+"-"+restParent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s.Stop(t, 30*time.Second)
	logs := s.Logs.String()
	if !strings.Contains(logs, `"tracing":"off"`) {
		t.Errorf("the start line does not say tracing is off:\n%s", logs)
	}
	if strings.Contains(logs, "opentelemetry") || strings.Contains(logs, "OpenTelemetry") {
		t.Errorf("OpenTelemetry logged with tracing off:\n%s", logs)
	}
}
