package restapi

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// resolveLimit returns the limit a check asks for and the counter name: the
// rule's when it names one (its limit, window, algorithm and refill rate
// override the request's; with always_count it counts hits past the limit),
// else the inline fields, with the client's default
// algorithm when none is given.
func resolveLimit(cache *store.Cache, c store.Client, req checkRequest) (algorithms.Limit, string, bool, error) {
	if req.Rule != "" {
		rule, ok := cache.Rule(c.ID, req.Rule)
		if !ok {
			return algorithms.Limit{}, "", false, &apiError{http.StatusNotFound, "RULE_NOT_FOUND", fmt.Sprintf("rule %q not found", req.Rule)}
		}
		if len(rule.RateLimits) > 0 {
			return algorithms.Limit{}, "", false, invalidField(fmt.Sprintf("rule %q has several limits (rate_limits): it limits Envoy requests only", req.Rule))
		}
		return rule.Limit, "rule:" + rule.Name, rule.AlwaysCount, nil
	}

	name := req.Algorithm
	if name == "" {
		name = string(c.DefaultAlgorithm)
	}
	if name == "" {
		name = string(algorithms.SlidingWindow)
	}
	alg, err := algorithms.ParseAlgorithm(name)
	if err != nil {
		return algorithms.Limit{}, "", false, invalidField("algorithm must be " + algorithms.Names())
	}
	if req.Limit == nil {
		return algorithms.Limit{}, "", false, missingField("limit is required when no rule is named")
	}
	l, err := inlineLimit(algorithms.Limit{Algorithm: alg}, req.Limit, req.Window, req.RefillRate)
	return l, "", false, err
}

// inlineLimit checks the limit, window (seconds) and refill rate given in a
// request body, for /check and /rules alike, as those of l (whose algorithm,
// and accuracy for a rule, are given). A refill rate given with a window
// algorithm is ignored.
func inlineLimit(l algorithms.Limit, limit, window *int64, refill *float64) (algorithms.Limit, error) {
	alg := l.Algorithm
	switch {
	case limit == nil:
		return l, missingField("limit is required")
	case window == nil && alg != algorithms.TokenBucket:
		return l, missingField(fmt.Sprintf("window (seconds) is required for %s", alg))
	case window != nil && *window <= 0:
		return l, invalidField("window must be a positive number of seconds")
	case window != nil && *window > math.MaxInt64/int64(time.Second):
		return l, invalidField(fmt.Sprintf("window %d seconds is out of range", *window))
	case refill != nil && alg == algorithms.TokenBucket && !(*refill > 0):
		// The engine reads 0 as "the default rate"; a client sending 0
		// means something else.
		return l, invalidField("refill_rate must be greater than 0 tokens per second")
	}
	l.Limit = *limit
	if window != nil {
		l.Window = time.Duration(*window) * time.Second
	}
	// refill_rate is accepted with every algorithm and ignored where it does
	// not apply: the product description's clients send one body for all.
	if refill != nil && alg == algorithms.TokenBucket {
		l.RefillRate = *refill
	}
	// The engine owns the bounds (algorithms.Limit.Validate).
	if err := l.Validate(); err != nil {
		return l, invalidField(err.Error())
	}
	return l, nil
}
