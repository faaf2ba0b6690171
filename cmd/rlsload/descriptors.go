package main

import (
	"strconv"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// benchDomain is the domain of benchDescriptors.
const benchDomain = "bench"

// hotLimit is the hot keys' limit per hour: a hot run admits this many
// calls, then (within the hour) only OVER_LIMIT.
const hotLimit = 100

// benchDescriptors is the configuration the cases expect: per algorithm one
// key whose every value is its own counter with a limit no run reaches
// (distinct, multi4), and one hot key with a small limit (hot).
const benchDescriptors = `# Descriptors of make bench-rls (rlsload -print-config).
domain: bench
descriptors:
  # distinct and multi4: every value its own counter, a limit no run reaches.
  - key: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: sliding_window
    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: sliding_window}
  - key: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: gcra}
  # hot: one value for a whole run, OVER_LIMIT after the first 100.
  - key: hot_fixed_window
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: hot_sliding_window
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window}
  - key: hot_token_bucket
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket}
  - key: hot_gcra
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: gcra}
`

// descriptorsPerCall is how many descriptors one call of the case carries.
func descriptorsPerCall(caseName string) int {
	if caseName == "multi4" {
		return 4
	}
	return 1
}

// requestFor returns the i-th request of a case for algorithm alg; run is
// part of every value, so that runs never share a counter.
func requestFor(domain, caseName, alg, run string, i int) *rlsv3.RateLimitRequest {
	entry := func(key, value string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: domain}
	switch caseName {
	case "hot":
		req.Descriptors = []*rlcommon.RateLimitDescriptor{entry("hot_"+alg, run)}
	case "multi4":
		base := run + "-" + strconv.Itoa(i) + "-"
		for j := range 4 {
			req.Descriptors = append(req.Descriptors, entry(alg, base+strconv.Itoa(j)))
		}
	default:
		req.Descriptors = []*rlcommon.RateLimitDescriptor{entry(alg, run+"-"+strconv.Itoa(i))}
	}
	return req
}
