package main

import (
	"errors"

	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// The gRPC rate-limit responses' headers: the reference service's three
// (LIMIT_RESPONSE_HEADERS_ENABLED and its names, here), beside
// RATE_LIMIT_HEADERS' sets with RATE_LIMIT_RESPONSE_HEADERS (coreSettings,
// config's HeaderSets and ResponseHeaders).

// limitHeaderSettings are LIMIT_RESPONSE_HEADERS_ENABLED and its names.
var limitHeaderSettings = []setting{
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
