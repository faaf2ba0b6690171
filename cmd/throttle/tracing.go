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

	endpointRaw, tracesEndpointRaw string
	protocolRaw, tracesProtocolRaw string
	headersRaw, resourceRaw        string
	samplerArgRaw                  string
}

// validate resolves the raw settings into the fields.
func (c *tracingConfig) validate() []error {
	var errs []error
	c.Protocol = c.tracesProtocolRaw
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if c.Protocol == "" {
		c.Protocol, name = c.protocolRaw, "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	if c.Protocol != protocolGRPC && c.Protocol != protocolHTTP {
		errs = append(errs, fmt.Errorf("%s: %q is not grpc or http/protobuf", name, c.Protocol))
	}

	// The traces endpoint is used as it is; the general one is a base URL
	// that http/protobuf appends /v1/traces to.
	c.Endpoint = ""
	raw, name := c.tracesEndpointRaw, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if raw == "" {
		raw, name = c.endpointRaw, "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	if raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not a URL such as http://collector:4318", name, raw))
		} else {
			if name == "OTEL_EXPORTER_OTLP_ENDPOINT" && c.Protocol == protocolHTTP {
				u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			}
			c.Endpoint = u.String()
		}
	}

	var err error
	if c.Headers, err = parseKeyValues(c.headersRaw); err != nil {
		errs = append(errs, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err))
	}
	kv, err := parseKeyValues(c.resourceRaw)
	if err != nil {
		errs = append(errs, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err))
	}
	c.Resource = c.Resource[:0]
	for k, v := range kv {
		c.Resource = append(c.Resource, attribute.String(k, v))
	}
	if c.ServiceName == "" {
		errs = append(errs, errors.New("OTEL_SERVICE_NAME: empty"))
	}

	switch c.Sampler {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		c.SamplerArg = 1
		if c.samplerArgRaw != "" {
			c.SamplerArg, err = strconv.ParseFloat(c.samplerArgRaw, 64)
			if err != nil || !(c.SamplerArg >= 0 && c.SamplerArg <= 1) {
				errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio between 0 and 1", c.samplerArgRaw))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio", c.Sampler))
	}
	return errs
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
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %q is not percent-encoded: %w", k, err)
		}
		m[k] = dv
	}
	return m, nil
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
// headers (they may hold a key), nor a password in the URL.
func (c *tracingConfig) String() string {
	if c.Endpoint == "" {
		return "off"
	}
	u, _ := url.Parse(c.Endpoint)
	u.User = nil
	return c.Protocol + " " + u.String()
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
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	var client otlptrace.Client
	switch c.Protocol {
	case protocolGRPC:
		creds := insecure.NewCredentials()
		if strings.HasPrefix(c.Endpoint, "https://") {
			creds = credentials.NewTLS(tlsConfig)
		}
		client = otlptracegrpc.NewClient(
			otlptracegrpc.WithEndpointURL(c.Endpoint),
			otlptracegrpc.WithDialOption(grpc.WithTransportCredentials(creds)), // wins over the exporter's own
			otlptracegrpc.WithHeaders(c.Headers),
			otlptracegrpc.WithCompressor("gzip"),
			otlptracegrpc.WithTimeout(exportTimeout),
		)
	default:
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEndpointURL(c.Endpoint), // http:// is clear text, https:// TLS
			otlptracehttp.WithHeaders(c.Headers),
			otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
			otlptracehttp.WithTimeout(exportTimeout),
		}
		if strings.HasPrefix(c.Endpoint, "https://") {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConfig)) // wins over the exporter's own
		}
		client = otlptracehttp.NewClient(opts...)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}

	// The resource, explicitly: the SDK's default would read
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES from the process
	// environment itself.
	attrs := append([]attribute.KeyValue{}, c.Resource...)
	attrs = append(attrs,
		semconv.ServiceName(c.ServiceName),
		semconv.ServiceVersion(version),
		semconv.TelemetrySDKName("opentelemetry"),
		semconv.TelemetrySDKLanguageGo,
		semconv.TelemetrySDKVersion(sdk.Version()),
	)

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
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
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
