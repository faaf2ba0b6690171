package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// The OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	protocolGRPC = "grpc"
	protocolHTTP = "http/protobuf"
)

// Fixed settings of the trace pipeline: the SDK's defaults, passed
// explicitly so that the SDK's and the exporters' own environment variables
// (OTEL_BSP_*, OTEL_SPAN_*_LIMIT, OTEL_EXPORTER_OTLP_TIMEOUT, …) change
// nothing Throttle does not list.
const (
	exportTimeout  = 10 * time.Second // one OTLP request
	batchTimeout   = 5 * time.Second  // longest a span waits to be sent
	flushTimeout   = 5 * time.Second  // SIGTERM: flushing the last spans, after the drain
	maxQueuedSpans = 2048             // beyond: spans are dropped, never waited for
	maxBatchSpans  = 512
)

// tracingConfig is the OpenTelemetry part of config: the standard OTEL_*
// variables Throttle honours, resolved as the OpenTelemetry specification
// says.
type tracingConfig struct {
	// Endpoint is the URL spans are sent to: for http/protobuf with its
	// path; for grpc only scheme, host and port count. Empty: tracing off.
	Endpoint    string
	Protocol    string // protocolGRPC or protocolHTTP
	Headers     map[string]string
	ServiceName string
	Resource    []attribute.KeyValue // OTEL_RESOURCE_ATTRIBUTES
	Sampler     string
	SamplerArg  float64

	// ref is what the reference service's TRACING_* settings gave
	// (tracingref.go).
	ref referenceTracing

	// baseEndpoint and baseProtocol are OTEL_EXPORTER_OTLP_ENDPOINT and
	// OTEL_EXPORTER_OTLP_PROTOCOL: Endpoint's and Protocol's defaults.
	baseEndpoint, baseProtocol string
}

// setDefaults resolves what the traces' own settings left empty from the
// general ones: the protocol, then the endpoint (a base URL that
// http/protobuf appends /v1/traces to).
func (c *tracingConfig) setDefaults() {
	if c.Protocol == "" {
		c.Protocol = c.baseProtocol
	}
	if c.Endpoint == "" && c.baseEndpoint != "" {
		u, _ := url.Parse(c.baseEndpoint) // parsed by parseOTLPURL already
		if c.Protocol == protocolHTTP {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		}
		c.Endpoint = u.String()
	}
}

// parseOTLPURL reads an OTLP endpoint: an http:// or https:// URL, or
// empty (none).
func parseOTLPURL(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not a URL such as http://collector:4318", v)
	}
	return u.String(), nil
}

// parseOTLPProtocol reads grpc or http/protobuf, or empty (the default).
func parseOTLPProtocol(v string) (string, error) {
	if v != "" && v != protocolGRPC && v != protocolHTTP {
		return "", fmt.Errorf("%q is not grpc or http/protobuf", v)
	}
	return v, nil
}

// parseSampler reads one of the samplers of OTEL_TRACES_SAMPLER.
func parseSampler(v string) (string, error) {
	switch v {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off", "traceidratio", "parentbased_traceidratio":
		return v, nil
	}
	return "", fmt.Errorf("%q is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio", v)
}

// parseRatio reads OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1; empty is 1.
func parseRatio(v string) (float64, error) {
	if v == "" {
		return 1, nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return 0, fmt.Errorf("%q is not a ratio between 0 and 1", v)
	}
	return r, nil
}

// parseAttributes reads OTEL_RESOURCE_ATTRIBUTES.
func parseAttributes(v string) ([]attribute.KeyValue, error) {
	kv, err := parseKeyValues(v)
	if err != nil {
		return nil, err
	}
	var attrs []attribute.KeyValue
	for k, v := range kv {
		attrs = append(attrs, attribute.String(k, v))
	}
	return attrs, nil
}

// parseKeyValues reads "k1=v1,k2=v2" with percent-encoded values, the form
// of OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES.
func parseKeyValues(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			// A header's value is often a key: quote a part only when it
			// can be nothing but a name ("api-key", its "=value" missing).
			if name := strings.TrimSpace(part); isToken(name) {
				return nil, fmt.Errorf("%q is not key=value", name)
			}
			return nil, errors.New("a part is not key=value (not shown: it may hold a secret)")
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %q is not percent-encoded", k)
		}
		m[k] = dv
	}
	return m, nil
}

// isToken reports whether s is a name: letters, digits, '-', '_' and '.'.
func isToken(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != ""
}

// sampler builds the sampler OTEL_TRACES_SAMPLER names.
func (c *tracingConfig) sampler() sdktrace.Sampler {
	switch c.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(c.SamplerArg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplerArg))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// String describes where spans go, for the start log line: never the
// headers (they may hold a key), nor the URL's user and password, nor a
// query parameter that may be a secret (redactURL).
func (c *tracingConfig) String() string {
	if c.Endpoint == "" {
		return "off"
	}
	u, _ := url.Parse(c.Endpoint)
	u.User = nil
	return c.Protocol + " " + redactURL(u.String())
}

// newTracerProvider returns the trace pipeline of c: spans batched and sent
// over OTLP. It returns nil when tracing is off (no endpoint): Throttle then
// makes no spans at all.
//
// Every setting is passed to the SDK and the exporter explicitly, from
// Throttle's configuration, so they mean what `throttle serve --help` says
// whatever else the environment holds (both would otherwise read their own
// OTEL_* variables). Connections use TLS with the system's roots for
// https://, none for http://; requests are gzip-compressed.
func newTracerProvider(ctx context.Context, c *tracingConfig, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if c.Endpoint == "" {
		return nil, nil
	}
	exp, err := otlptrace.New(ctx, c.exportClient())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}

	// The SDK reports failed exports through its one process-wide error
	// handler; serve is the process. Into the JSON log, not stderr's plain
	// text.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "err", err)
	}))

	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp,
			sdktrace.WithBatchTimeout(batchTimeout),
			sdktrace.WithExportTimeout(exportTimeout),
			sdktrace.WithMaxQueueSize(maxQueuedSpans),
			sdktrace.WithMaxExportBatchSize(maxBatchSpans),
		),
		sdktrace.WithResource(c.serviceResource()),
		sdktrace.WithSampler(c.sampler()),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
			AttributeValueLengthLimit:   sdktrace.DefaultAttributeValueLengthLimit,
			AttributeValueDepthLimit:    sdktrace.DefaultAttributeValueDepthLimit,
			AttributeCountLimit:         sdktrace.DefaultAttributeCountLimit,
			EventCountLimit:             sdktrace.DefaultEventCountLimit,
			LinkCountLimit:              sdktrace.DefaultLinkCountLimit,
			AttributePerEventCountLimit: sdktrace.DefaultAttributePerEventCountLimit,
			AttributePerLinkCountLimit:  sdktrace.DefaultAttributePerLinkCountLimit,
		}),
	), nil
}

// exportClient returns the OTLP client of c's protocol: gRPC, or HTTP
// (the default). Connections use TLS with the system's roots for https://,
// none for http://; requests are gzip-compressed.
func (c *tracingConfig) exportClient() otlptrace.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.Protocol == protocolGRPC {
		creds := insecure.NewCredentials()
		if strings.HasPrefix(c.Endpoint, "https://") {
			creds = credentials.NewTLS(tlsConfig)
		}
		return otlptracegrpc.NewClient(
			otlptracegrpc.WithEndpointURL(c.Endpoint),
			otlptracegrpc.WithDialOption(grpc.WithTransportCredentials(creds)), // wins over the exporter's own
			otlptracegrpc.WithHeaders(c.Headers),
			otlptracegrpc.WithCompressor("gzip"),
			otlptracegrpc.WithTimeout(exportTimeout),
		)
	}
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(c.Endpoint), // http:// is clear text, https:// TLS
		otlptracehttp.WithHeaders(c.Headers),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
		otlptracehttp.WithTimeout(exportTimeout),
	}
	if strings.HasPrefix(c.Endpoint, "https://") {
		opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConfig)) // wins over the exporter's own
	}
	return otlptracehttp.NewClient(opts...)
}

// serviceResource is the resource of c's spans, made explicitly: the SDK's
// default would read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES from the
// process environment itself.
func (c *tracingConfig) serviceResource() *resource.Resource {
	attrs := append([]attribute.KeyValue{}, c.Resource...)
	attrs = append(attrs,
		semconv.ServiceName(c.ServiceName),
		semconv.ServiceVersion(version),
		semconv.TelemetrySDKName("opentelemetry"),
		semconv.TelemetrySDKLanguageGo,
		semconv.TelemetrySDKVersion(sdk.Version()),
	)
	return resource.NewWithAttributes(semconv.SchemaURL, attrs...)
}
