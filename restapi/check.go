package restapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/store"
)

const (
	maxIdentifierLen     = 256
	defaultWarnThreshold = 0.2
)

// checkRequest is the body of POST /check and POST /check/ip. Pointers tell
// a field left out from one given as zero.
type checkRequest struct {
	Identifier    *string  `json:"identifier"`
	Limit         *int64   `json:"limit"`
	Window        *int64   `json:"window"`
	Algorithm     string   `json:"algorithm"`
	Rule          string   `json:"rule"`
	WarnThreshold *float64 `json:"warn_threshold"`
	RefillRate    *float64 `json:"refill_rate"`
	Hits          *int64   `json:"hits"`
}

// checkReply is the reply of POST /check and POST /check/ip.
type checkReply struct {
	Allowed    bool   `json:"allowed"`
	Exempted   bool   `json:"exempted"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	ResetAt    int64  `json:"reset_at"`
	RetryAfter int64  `json:"retry_after"`
	Algorithm  string `json:"algorithm"`
	Rule       string `json:"rule,omitempty"`
	Warning    bool   `json:"warning"`
}

// handleCheck decides one request of the caller's identifier (byIP false) or
// of the caller's client IP (byIP true).
//
// Counters are keyed by (client id, identifier, name). The name is
// "rule:<rule>" for a rule, and empty for an inline limit, which the engine
// then names by algorithm, limit, window and refill rate, so two different
// inline limits never share a counter. /check/ip is exactly /check with the
// client IP as identifier: /check with identifier "203.0.113.7" and the same
// limit counts against the same counter, and POST /reset with that
// identifier clears it.
func handleCheck(d checkDeps, m *metrics, byIP bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		ch, err := parseCheck(w, r, d, c, byIP)
		if err != nil {
			writeError(w, r, err)
			return
		}
		alg := string(ch.limit.Algorithm)
		if d.Cache.Exempt(c.ID, ch.identifier) {
			d.Usage.Record(c.ID, ch.identifier, alg, true)
			m.decisions.WithLabelValues("rest", alg, "exempt").Inc()
			writeCheck(w, r, d.HeaderSets, ch, ch.exemptReply(d.Now()), -1)
			return
		}
		key := algorithms.Key{Scope: c.ID, Identifier: ch.identifier, Name: ch.counter}
		dec, err := checkOne(r.Context(), d.Limiter, algorithms.Request{Key: key, Limit: ch.limit, Hits: ch.hits, AlwaysCount: ch.alwaysCount})
		if err != nil {
			writeError(w, r, err)
			return
		}
		d.Usage.Record(c.ID, ch.identifier, alg, dec.Allowed)
		outcome := "allowed"
		if !dec.Allowed {
			outcome = "rejected"
		}
		m.decisions.WithLabelValues("rest", alg, outcome).Inc()
		writeCheck(w, r, d.HeaderSets, ch, ch.reply(dec), ceilSeconds(dec.ResetAfter))
	})
}

// check is a /check or /check/ip request, parsed and checked.
type check struct {
	identifier string
	limit      algorithms.Limit
	counter    string // the counter's name: "rule:<rule>", or "" for an inline limit
	rule       string // the rule the request named, or ""
	hits       int64
	threshold  float64 // warn when remaining/limit is below it
	// alwaysCount: the rule always counts its hits, even past the limit (a
	// cost reported after the fact).
	alwaysCount bool
}

// parseCheck reads the body of a /check (byIP false) or /check/ip request of
// client c and checks it, field by field in the order the API documents.
func parseCheck(w http.ResponseWriter, r *http.Request, d checkDeps, c store.Client, byIP bool) (check, error) {
	req, err := decode[checkRequest](w, r)
	if err != nil {
		return check{}, err
	}
	ch := check{rule: req.Rule, hits: 1, threshold: defaultWarnThreshold}
	switch {
	case byIP && req.Identifier != nil:
		return check{}, invalidField("identifier must be left out on /check/ip: it is the client's IP address")
	case byIP:
		ch.identifier = clientIP(r, d.TrustedProxies)
	case req.Identifier == nil || *req.Identifier == "":
		return check{}, missingField("identifier is required")
	case utf8.RuneCountInString(*req.Identifier) > maxIdentifierLen:
		return check{}, invalidField(fmt.Sprintf("identifier is longer than %d characters", maxIdentifierLen))
	default:
		ch.identifier = *req.Identifier
	}
	if ch.limit, ch.counter, ch.alwaysCount, err = resolveLimit(d.Cache, c, req); err != nil {
		return check{}, err
	}
	if t := req.WarnThreshold; t != nil {
		if !(*t > 0 && *t < 1) {
			return check{}, invalidField("warn_threshold must be a number between 0 and 1, both excluded")
		}
		ch.threshold = *t
	}
	if h := req.Hits; h != nil {
		if *h < 0 || *h > algorithms.MaxLimit {
			return check{}, invalidField(fmt.Sprintf("hits must be between 0 and %d", int64(algorithms.MaxLimit)))
		}
		ch.hits = *h
	}
	return ch, nil
}

// reply is the reply to ch decided as dec.
func (ch check) reply(dec algorithms.Decision) checkReply {
	reply := checkReply{
		Allowed:    dec.Allowed,
		Identifier: ch.identifier,
		Limit:      dec.Limit,
		Remaining:  dec.Remaining,
		ResetAt:    ceilUnix(dec.ResetAt()),
		Algorithm:  string(ch.limit.Algorithm),
		Rule:       ch.rule,
		Warning:    float64(dec.Remaining) < ch.threshold*float64(dec.Limit),
	}
	if !dec.Allowed {
		reply.RetryAfter = max(ceilSeconds(dec.RetryAfter), 1)
	}
	return reply
}

// exemptReply is the reply to ch when its identifier is exempt: allowed,
// with the whole limit remaining, and nothing counted.
func (ch check) exemptReply(now time.Time) checkReply {
	return checkReply{
		Allowed: true, Exempted: true, Identifier: ch.identifier,
		Limit: ch.limit.Limit, Remaining: ch.limit.Limit, ResetAt: ceilUnix(now),
		Algorithm: string(ch.limit.Algorithm), Rule: ch.rule,
	}
}

// writeCheck writes reply with its rate-limit headers (the sets that sets
// chooses); reset is the draft's t, the seconds until the state is fresh
// again. An exempt reply has no reset in its headers: nothing was counted.
func writeCheck(w http.ResponseWriter, r *http.Request, sets ratelimitheader.Sets, ch check, reply checkReply, reset int64) {
	lh := limitHeaders{
		policy: policyName(ch.rule, ch.limit), limit: ch.limit, remaining: reply.Remaining,
		resetAt: reply.ResetAt, reset: reset, retryAfter: reply.RetryAfter,
	}
	if reply.Exempted {
		lh.resetAt, lh.reset = 0, -1
	}
	h := w.Header()
	setLimitHeaders(h, sets, lh)
	if sets.SendsX() {
		h.Set("X-RateLimit-Algorithm", reply.Algorithm)
		if reply.Warning {
			h.Set("X-RateLimit-Warning", "true")
		}
	}
	encode(w, r, http.StatusOK, reply)
}

// checkDeps is what /check and /check/ip use.
type checkDeps struct {
	Cache          *store.Cache
	Usage          *store.UsageRecorder
	Limiter        algorithms.Store
	TrustedProxies []netip.Prefix
	HeaderSets     ratelimitheader.Sets
	Now            func() time.Time
}

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
	l, err := inlineLimit(alg, req.Limit, req.Window, req.RefillRate)
	return l, "", false, err
}

// inlineLimit checks the limit, window (seconds) and refill rate given in a
// request body, for /check and /rules alike. A refill rate given with a
// window algorithm is ignored.
func inlineLimit(alg algorithms.Algorithm, limit, window *int64, refill *float64) (algorithms.Limit, error) {
	l := algorithms.Limit{Algorithm: alg}
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

// checkOne decides one request, the way /check, /check/ip and /register's
// own limit do: an error comes back mapped for writeError (limiterError).
func checkOne(ctx context.Context, limiter algorithms.Store, req algorithms.Request) (algorithms.Decision, error) {
	decs, err := limiter.Check(ctx, []algorithms.Request{req})
	if err == nil && len(decs) != 1 {
		err = fmt.Errorf("limiter returned %d decisions for 1 request", len(decs))
	}
	if err != nil {
		return algorithms.Decision{}, limiterError(err)
	}
	d := decs[0]
	if d.Limit == 0 {
		d.Limit = req.Limit.Limit
	}
	return d, nil
}

// limiterError marks a limiter's error that is not the client's (a refused
// limit is) as the backend's: 503, its cause logged. ErrOverloaded stays
// recognizable through it.
func limiterError(err error) error {
	if errors.Is(err, algorithms.ErrInvalid) {
		return err
	}
	return &backendError{err}
}
