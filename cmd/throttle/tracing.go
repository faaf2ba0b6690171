package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/throttle-rl/throttle/internal/telemetry/otlp"
)

// The OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	protocolGRPC = otlp.ProtocolGRPC
	protocolHTTP = otlp.ProtocolHTTP
)

// flushTimeout bounds the last sends at SIGTERM, after the drain: the
// spans, and the reference stats.
const flushTimeout = 5 * time.Second

// tracingSettings are OpenTelemetry's standard variables, named by its
// specification.
var tracingSettings = []setting{
	{env: "OTEL_EXPORTER_OTLP_ENDPOINT", flag: "otel-exporter-otlp-endpoint",
		usage: "OpenTelemetry tracing: base URL of the OTLP receiver, such as http://collector:4318 (http/protobuf; " +
			"/v1/traces is appended) or http://collector:4317 (grpc); https:// uses TLS with the system's roots; empty = " +
			"tracing off (no spans, no cost)",
		set: func(c *config, v string) (err error) { c.Tracing.baseEndpoint, err = parseOTLPURL(v); return }},
	{env: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", flag: "otel-exporter-otlp-traces-endpoint",
		usage: "URL for traces, used as it is (http/protobuf: with its path, such as http://collector:4318/v1/traces); wins " +
			"over OTEL_EXPORTER_OTLP_ENDPOINT, and alone turns tracing on too",
		set: func(c *config, v string) (err error) { c.Tracing.Endpoint, err = parseOTLPURL(v); return }},
	{env: "OTEL_EXPORTER_OTLP_PROTOCOL", flag: "otel-exporter-otlp-protocol", def: protocolHTTP,
		usage: "OTLP transport: grpc or http/protobuf",
		set:   func(c *config, v string) (err error) { c.Tracing.baseProtocol, err = parseOTLPProtocol(v); return }},
	{env: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", flag: "otel-exporter-otlp-traces-protocol",
		usage: "OTLP transport for traces; empty = OTEL_EXPORTER_OTLP_PROTOCOL",
		set:   func(c *config, v string) (err error) { c.Tracing.Protocol, err = parseOTLPProtocol(v); return }},
	{env: "OTEL_EXPORTER_OTLP_HEADERS", flag: "otel-exporter-otlp-headers",
		usage: "headers of every OTLP request (such as the tracing backend's API key): key=value pairs, comma-separated, " +
			"values percent-encoded; never logged",
		set: func(c *config, v string) (err error) { c.Tracing.Headers, err = parseKeyValues(v); return }},
	{env: "OTEL_SERVICE_NAME", flag: "otel-service-name", def: "throttle",
		usage: "service.name of the spans (wins over one in OTEL_RESOURCE_ATTRIBUTES)",
		set:   func(c *config, v string) (err error) { c.Tracing.ServiceName, err = parseNonEmpty(v); return }},
	{env: "OTEL_RESOURCE_ATTRIBUTES", flag: "otel-resource-attributes",
		usage: "more resource attributes of the spans: key=value pairs, comma-separated, values percent-encoded (such as " +
			"deployment.environment.name=prod)",
		set: func(c *config, v string) (err error) { c.Tracing.Resource, err = parseAttributes(v); return }},
	{env: "OTEL_TRACES_SAMPLER", flag: "otel-traces-sampler", def: "parentbased_always_on",
		usage: "which traces are recorded: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off " +
			"or parentbased_traceidratio (parentbased_*: follow the caller's sampled flag when it sends a traceparent)",
		set: func(c *config, v string) (err error) { c.Tracing.Sampler, err = parseSampler(v); return }},
	{env: "OTEL_TRACES_SAMPLER_ARG", flag: "otel-traces-sampler-arg",
		usage: "the ratio of traces the traceidratio samplers record, 0 to 1; empty = 1",
		set:   func(c *config, v string) (err error) { c.Tracing.SamplerArg, err = parseRatio(v); return }},
}

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

// openTracing starts OpenTelemetry (package otlp) when an OTLP endpoint is
// set; at close it sends the spans of the drained requests.
func (a *app) openTracing(ctx context.Context) error {
	a.propagator = propagation.TraceContext{} // W3C traceparent, tracestate
	c := &a.cfg.Tracing
	sdkTracer, err := otlp.NewTracerProvider(ctx, otlp.Options{
		Endpoint: c.Endpoint, Protocol: c.Protocol, Headers: c.Headers, ServiceName: c.ServiceName, ServiceVersion: version,
		Resource: c.Resource, Sampler: c.Sampler, SamplerArg: c.SamplerArg, Log: a.log,
	})
	if err != nil || sdkTracer == nil {
		return err
	}
	a.tracer = sdkTracer
	a.onClose(func() {
		fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := sdkTracer.Shutdown(fctx); err != nil {
			a.log.Warn("OpenTelemetry: spans not all sent before shutdown", "err", err)
		}
	})
	return nil
}
