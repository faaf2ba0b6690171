// Package otlp builds the trace pipeline of `throttle serve`: OpenTelemetry's
// SDK, spans batched and sent over OTLP (gRPC or HTTP) to a collector. It is
// apart from package telemetry, which the front doors import for their
// spans, so that only cmd/throttle links the SDK and the exporters.
//
// Every setting is passed to the SDK and the exporter explicitly, so they
// mean what Throttle's settings say whatever else the environment holds
// (both would otherwise read their own OTEL_* variables).
package otlp

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
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
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Fixed settings of the trace pipeline: the SDK's defaults, passed
// explicitly so that the SDK's and the exporters' own environment variables
// (OTEL_BSP_*, OTEL_SPAN_*_LIMIT, OTEL_EXPORTER_OTLP_TIMEOUT, …) change
// nothing Throttle does not list.
const (
	exportTimeout  = 10 * time.Second // one OTLP request
	batchTimeout   = 5 * time.Second  // longest a span waits to be sent
	maxQueuedSpans = 2048             // beyond: spans are dropped, never waited for
	maxBatchSpans  = 512
)

// Options are a trace pipeline's settings.
type Options struct {
	// Endpoint is the URL spans are sent to: for ProtocolHTTP with its
	// path; for ProtocolGRPC only scheme, host and port count. https://
	// uses TLS with the system's roots, http:// none. Empty: no pipeline.
	Endpoint string
	Protocol string            // ProtocolGRPC, or ProtocolHTTP (any other value)
	Headers  map[string]string // of every OTLP request
	// ServiceName and ServiceVersion are the spans' service.name and
	// service.version; Resource, their other resource attributes.
	ServiceName, ServiceVersion string
	Resource                    []attribute.KeyValue
	// Sampler names the sampler as OTEL_TRACES_SAMPLER does (Sampler);
	// SamplerArg is the ratio of the traceidratio samplers.
	Sampler    string
	SamplerArg float64
	// Log receives the SDK's errors (failed exports); nil: discarded.
	Log *slog.Logger
}

// NewTracerProvider returns the trace pipeline of o: spans batched and sent
// over OTLP, gzip-compressed. It returns nil when o has no endpoint: the
// caller then makes no spans at all.
//
// The SDK reports failed exports through its one process-wide error
// handler, which NewTracerProvider sets to o.Log: call it once, from main's
// process.
func NewTracerProvider(ctx context.Context, o Options) (*sdktrace.TracerProvider, error) {
	if o.Endpoint == "" {
		return nil, nil
	}
	exp, err := otlptrace.New(ctx, o.exportClient())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Into the service's log, not stderr's plain text.
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
		sdktrace.WithResource(o.serviceResource()),
		sdktrace.WithSampler(Sampler(o.Sampler, o.SamplerArg)),
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

// Sampler is the sampler OTEL_TRACES_SAMPLER calls name (always_on,
// always_off, traceidratio, parentbased_always_off,
// parentbased_traceidratio; anything else is parentbased_always_on), ratio
// the traceidratio samplers' share.
func Sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// exportClient returns the OTLP client of o's protocol: gRPC, or HTTP
// (the default). Connections use TLS with the system's roots for https://,
// none for http://; requests are gzip-compressed.
func (o Options) exportClient() otlptrace.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.Protocol == ProtocolGRPC {
		creds := insecure.NewCredentials()
		if strings.HasPrefix(o.Endpoint, "https://") {
			creds = credentials.NewTLS(tlsConfig)
		}
		return otlptracegrpc.NewClient(
			otlptracegrpc.WithEndpointURL(o.Endpoint),
			otlptracegrpc.WithDialOption(grpc.WithTransportCredentials(creds)), // wins over the exporter's own
			otlptracegrpc.WithHeaders(o.Headers),
			otlptracegrpc.WithCompressor("gzip"),
			otlptracegrpc.WithTimeout(exportTimeout),
		)
	}
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(o.Endpoint), // http:// is clear text, https:// TLS
		otlptracehttp.WithHeaders(o.Headers),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
		otlptracehttp.WithTimeout(exportTimeout),
	}
	if strings.HasPrefix(o.Endpoint, "https://") {
		opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConfig)) // wins over the exporter's own
	}
	return otlptracehttp.NewClient(opts...)
}

// serviceResource is the resource of o's spans, made explicitly: the SDK's
// default would read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES from the
// process environment itself.
func (o Options) serviceResource() *resource.Resource {
	attrs := append([]attribute.KeyValue{}, o.Resource...)
	attrs = append(attrs,
		semconv.ServiceName(o.ServiceName),
		semconv.ServiceVersion(o.ServiceVersion),
		semconv.TelemetrySDKName("opentelemetry"),
		semconv.TelemetrySDKLanguageGo,
		semconv.TelemetrySDKVersion(sdk.Version()),
	)
	return resource.NewWithAttributes(semconv.SchemaURL, attrs...)
}
