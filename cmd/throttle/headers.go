package main

import (
	"errors"

	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// headerSettings are the rate-limit headers: RATE_LIMIT_HEADERS' sets on
// REST replies and, with RATE_LIMIT_RESPONSE_HEADERS, on gRPC rate-limit
// responses (config's HeaderSets and ResponseHeaders); and the reference
// service's three (LIMIT_RESPONSE_HEADERS_ENABLED and its names) as one more
// set on gRPC responses.
var headerSettings = []setting{
	{env: "RATE_LIMIT_HEADERS", flag: "rate-limit-headers", def: "both",
		usage: "rate-limit headers on REST /check, /check/ip and /register replies, and on gRPC responses with " +
			"RATE_LIMIT_RESPONSE_HEADERS: x (X-RateLimit-* only), ietf (only RateLimit-Policy and RateLimit of " +
			"draft-ietf-httpapi-ratelimit-headers-11) or both; Retry-After comes with every rejection whatever this says",
		set: func(c *config, v string) (err error) { c.HeaderSets, err = ratelimitheader.ParseSets(v); return }},
	{env: "RATE_LIMIT_RESPONSE_HEADERS", flag: "rate-limit-response-headers", def: "false",
		usage: "add the RATE_LIMIT_HEADERS headers (and Retry-After when over the limit, RateLimit-Degraded: true when " +
			"FAILURE_MODE decided) to gRPC rate-limit responses, for Envoy to add to its reply",
		set: func(c *config, v string) (err error) { c.ResponseHeaders, err = parseBool(v); return }},
	{env: "LIMIT_RESPONSE_HEADERS_ENABLED", flag: "limit-response-headers-enabled", def: "false", ref: upstreamDefault("false"),
		usage: "add the reference's three headers (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER) of the " +
			"descriptor closest to its limit to gRPC rate-limit responses, for Envoy to add to its reply; beside " +
			"RATE_LIMIT_RESPONSE_HEADERS' sets when both are on",
		set: func(c *config, v string) (err error) { c.LimitHeaders.Enabled, err = parseBool(v); return }},
	{env: "LIMIT_LIMIT_HEADER", flag: "limit-limit-header", def: "RateLimit-Limit", ref: upstreamDefault("RateLimit-Limit"),
		usage: "with LIMIT_RESPONSE_HEADERS_ENABLED: the header carrying requests_per_unit",
		set:   func(c *config, v string) error { c.LimitHeaders.Limit = v; return nil }},
	{env: "LIMIT_REMAINING_HEADER", flag: "limit-remaining-header", def: "RateLimit-Remaining", ref: upstreamDefault("RateLimit-Remaining"),
		usage: "with LIMIT_RESPONSE_HEADERS_ENABLED: the header carrying the requests left in the window",
		set:   func(c *config, v string) error { c.LimitHeaders.Remaining = v; return nil }},
	{env: "LIMIT_RESET_HEADER", flag: "limit-reset-header", def: "RateLimit-Reset", ref: upstreamDefault("RateLimit-Reset"),
		usage: "with LIMIT_RESPONSE_HEADERS_ENABLED: the header carrying the seconds until the window resets",
		set:   func(c *config, v string) error { c.LimitHeaders.Reset = v; return nil }},
}

// limitHeadersConfig is LIMIT_RESPONSE_HEADERS_ENABLED and its names.
type limitHeadersConfig struct {
	Enabled bool
	ratelimitsvc.LimitHeaders
}

// validate checks that the headers have names when they are on.
func (h limitHeadersConfig) validate() []error {
	if h.Enabled && (h.Limit == "" || h.Remaining == "" || h.Reset == "") {
		return []error{errors.New("LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER must not be empty with LIMIT_RESPONSE_HEADERS_ENABLED")}
	}
	return nil
}

// limitHeaders is ratelimitsvc's LimitHeaders, nil when off.
func (c *config) limitHeaders() *ratelimitsvc.LimitHeaders {
	if !c.LimitHeaders.Enabled {
		return nil
	}
	h := c.LimitHeaders.LimitHeaders
	return &h
}
