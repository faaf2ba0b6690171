package main

import (
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// referenceTracingSettings are the reference service's tracing settings,
// mapped onto the OTEL_* ones (applyReference): a variable OTEL_* gives
// wins over its TRACING_* counterpart.
var referenceTracingSettings = []setting{
	{env: "TRACING_ENABLED", flag: "tracing-enabled", def: "false", ref: upstreamDefault("false"),
		usage: "the reference service's switch: traces are sent to OTEL_EXPORTER_OTLP_ENDPOINT, or when it is empty to " +
			"OpenTelemetry's default collector on localhost (http://localhost:4318, or :4317 with grpc), as the " +
			"reference's SDK does; without it an OTLP endpoint alone turns tracing on",
		set: func(c *config, v string) (err error) { c.Tracing.ref.enabled, err = parseBool(v); return }},
	{env: "TRACING_SERVICE_NAME", flag: "tracing-service-name", ref: upstreamDefault("RateLimit"),
		usage: "service.name of the spans when OTEL_SERVICE_NAME is not given (the reference's default is RateLimit, " +
			"Throttle's throttle)",
		set: func(c *config, v string) error { c.Tracing.ref.serviceName = v; return nil }},
	{env: "TRACING_SERVICE_NAMESPACE", flag: "tracing-service-namespace", ref: upstreamDefault(""),
		usage: "service.namespace of the spans",
		set:   func(c *config, v string) error { c.Tracing.ref.namespace = v; return nil }},
	{env: "TRACING_SERVICE_INSTANCE_ID", flag: "tracing-service-instance-id", ref: upstreamDefault(""),
		usage: "service.instance.id of the spans",
		set:   func(c *config, v string) error { c.Tracing.ref.instanceID = v; return nil }},
	{env: "TRACING_EXPORTER_PROTOCOL", flag: "tracing-exporter-protocol", ref: upstreamDefault("http"),
		usage: "http or grpc, when OTEL_EXPORTER_OTLP_PROTOCOL is not given (the reference's default is http, as Throttle's)",
		set:   func(c *config, v string) (err error) { c.Tracing.ref.protocol, err = parseReferenceProtocol(v); return }},
	{env: "TRACING_SAMPLING_RATE", flag: "tracing-sampling-rate", ref: upstreamDefault("1"),
		usage: "ratio of traces recorded, 0 to 1, when OTEL_TRACES_SAMPLER is not given: parentbased_traceidratio with this " +
			"ratio, as the reference samples",
		set: func(c *config, v string) (err error) { c.Tracing.ref.rate, err = parseOptionalRatio(v); return }},
}

// referenceTracing is what the TRACING_* settings gave.
type referenceTracing struct {
	enabled                                      bool
	serviceName, namespace, instanceID, protocol string
	rate                                         *float64
}

// applyReference resolves the TRACING_* settings onto c, where the OTEL_*
// variable each maps to was not given. It runs before setDefaults.
func (c *tracingConfig) applyReference(given map[string]string) {
	r := c.ref
	if _, ok := given["OTEL_SERVICE_NAME"]; !ok && r.serviceName != "" {
		c.ServiceName = r.serviceName
	}
	if r.namespace != "" {
		c.Resource = append(c.Resource, semconv.ServiceNamespace(r.namespace))
	}
	if r.instanceID != "" {
		c.Resource = append(c.Resource, attribute.String(string(semconv.ServiceInstanceIDKey), r.instanceID))
	}
	_, protocolGiven := given["OTEL_EXPORTER_OTLP_PROTOCOL"]
	if !protocolGiven && r.protocol != "" {
		c.baseProtocol = r.protocol
	}
	if _, ok := given["OTEL_TRACES_SAMPLER"]; !ok && r.rate != nil {
		c.Sampler, c.SamplerArg = "parentbased_traceidratio", *r.rate
	}
	if r.enabled && c.baseEndpoint == "" && c.Endpoint == "" {
		c.baseEndpoint = "http://localhost:4318"
		if c.baseProtocol == protocolGRPC {
			c.baseEndpoint = "http://localhost:4317"
		}
	}
}

// parseReferenceProtocol reads TRACING_EXPORTER_PROTOCOL: http or grpc;
// empty is none.
func parseReferenceProtocol(v string) (string, error) {
	switch v {
	case "":
		return "", nil
	case "http":
		return protocolHTTP, nil
	case "grpc":
		return protocolGRPC, nil
	}
	return "", fmt.Errorf("%q is not http or grpc", v)
}

// parseOptionalRatio reads a ratio from 0 to 1; empty is none.
func parseOptionalRatio(v string) (*float64, error) {
	if v == "" {
		return nil, nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return nil, fmt.Errorf("%q is not a number", v)
	}
	r = min(max(r, 0), 1) // the reference: ≥1 samples all, ≤0 none
	return &r, nil
}
