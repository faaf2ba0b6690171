package restapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/inputsize"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/store"
)

const (
	maxIdentifierLen     = 256
	defaultWarnThreshold = 0.2
)

// checkRequest is the body of POST /check and POST /check/ip, and one check
// of POST /check/batch. Pointers tell a field left out from one given as
// zero.
type checkRequest struct {
	Identifier    *string  `json:"identifier"`
	Limit         *int64   `json:"limit"`
	Window        *int64   `json:"window"`
	Algorithm     string   `json:"algorithm"`
	Rule          string   `json:"rule"`
	WarnThreshold *float64 `json:"warn_threshold"`
	RefillRate    *float64 `json:"refill_rate"`
	Hits          *int64   `json:"hits"`
	ReserveTTL    *float64 `json:"reserve_ttl"`
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
	Override   string `json:"override,omitempty"`
	Warning    bool   `json:"warning"`
	Reason     string `json:"reason"`
	// ReservationID and ReservationExpiresAt: the reservation the check
	// made (reserve_ttl), when its hits were admitted and held.
	ReservationID        string `json:"reservation_id,omitempty"`
	ReservationExpiresAt string `json:"reservation_expires_at,omitempty"`
}

// The reasons of a decision (checkReply.Reason): what decided it.
const (
	reasonWithinLimit   = "within_limit"   // the limit admitted it
	reasonRateLimited   = "rate_limited"   // the limit refused it
	reasonExempt        = "exempt"         // the identifier is exempt: nothing counted
	reasonFailurePolicy = "failure_policy" // the counter backend could not be asked: FAILURE_MODE decided
)

// degradedHeader marks a reply whose decision the failure policy made
// (FAILURE_MODE) instead of the counter backend.
const degradedHeader = "RateLimit-Degraded"

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
		req, err := decode[checkRequest](w, r)
		var ch check
		if err == nil {
			ch, err = newCheck(r, d, c, req, byIP)
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		got, err := decideChecks(r.Context(), d, m, c, []check{ch})
		if err != nil {
			writeError(w, r, err)
			return
		}
		setCheckHeaders(w.Header(), d.HeaderSets, got[0])
		encode(w, r, http.StatusOK, got[0].reply)
	})
}

// check is a /check or /check/ip request, or one check of a batch, parsed
// and checked.
type check struct {
	identifier string
	limit      algorithms.Limit
	counter    string // the counter's name: "rule:<rule>", or "" for an inline limit
	rule       string // the rule the request named, or ""
	override   string // the rule's override that applies: an identifier or pattern, or ""
	hits       int64
	threshold  float64 // warn when remaining/limit is below it
	// alwaysCount: the rule always counts its hits, even past the limit (a
	// cost reported after the fact).
	alwaysCount bool
	// reserveTTL, when > 0, holds the admitted hits as a reservation for
	// that long (reserve_ttl; reservations.go).
	reserveTTL time.Duration
}

// newCheck checks the body req of a /check (byIP false) or /check/ip
// request of client c, field by field in the order the API documents.
func newCheck(r *http.Request, d checkDeps, c store.Client, req checkRequest, byIP bool) (check, error) {
	ch := check{rule: req.Rule, hits: 1, threshold: defaultWarnThreshold}
	if err := checkSizes(req); err != nil {
		return check{}, err
	}
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
	var err error
	if ch.limit, ch.counter, ch.alwaysCount, err = resolveLimit(d.Cache, c, req); err != nil {
		return check{}, err
	}
	if ch.rule != "" {
		if o, ok := d.Cache.Override(c.ID, ch.rule, ch.identifier); ok {
			ch.limit, ch.override = o.Apply(ch.limit), o.Identifier
		}
	}
	if t := req.WarnThreshold; t != nil {
		if !(*t > 0 && *t < 1) {
			return check{}, invalidField("warn_threshold must be a number between 0 and 1, both excluded")
		}
		ch.threshold = *t
	}
	if h := req.Hits; h != nil { // negative: a refund
		if *h < -algorithms.MaxLimit || *h > algorithms.MaxLimit {
			return check{}, invalidField(fmt.Sprintf("hits must be between %d and %d", -int64(algorithms.MaxLimit), int64(algorithms.MaxLimit)))
		}
		ch.hits = *h
	}
	if req.ReserveTTL != nil {
		if err := checkReservation(&ch, *req.ReserveTTL, d.Reservations); err != nil {
			return check{}, err
		}
	}
	return ch, nil
}

// checkSizes refuses a check body whose identifier or rule is over the
// input-size rule's cap (package inputsize), before either is looked up,
// counted or written back.
func checkSizes(req checkRequest) error {
	err := inputsize.String("rule", req.Rule)
	if err == nil && req.Identifier != nil {
		err = inputsize.String("identifier", *req.Identifier)
	}
	if err != nil {
		return invalidField(err.Error())
	}
	return nil
}

// decided is a check's reply and what its headers say beyond it.
type decided struct {
	check check
	reply checkReply
	// reset is the draft's t, the seconds until the state is fresh again;
	// -1 for an exempt identifier (nothing was counted).
	reset int64
}

// decideChecks decides checks of client c in one engine call: exempt
// identifiers are allowed without it, and the others, when there are
// several, count only if every one is within its limit (all-or-nothing).
// Every decision is recorded for the client's usage (/stats/{client_id})
// and the metrics.
func decideChecks(ctx context.Context, d checkDeps, m *metrics, c store.Client, checks []check) ([]decided, error) {
	out := make([]decided, len(checks))
	reqs := make([]algorithms.Request, 0, len(checks))
	at := make([]int, 0, len(checks)) // the check of each engine request
	for i, ch := range checks {
		out[i].check = ch
		if d.Cache.Exempt(c.ID, ch.identifier) {
			out[i].reply, out[i].reset = ch.exemptReply(d.Now()), -1
			continue
		}
		key := algorithms.Key{Scope: algorithms.ClientScope(c.ID), Identifier: ch.identifier, Name: ch.counter}
		reqs = append(reqs, algorithms.Request{Key: key, Limit: ch.limit, Hits: ch.hits, AlwaysCount: ch.alwaysCount})
		at = append(at, i)
	}
	if len(reqs) > 1 {
		for i := range reqs {
			reqs[i].AllOrNothing = true
		}
	}
	holds, err := d.holdReservations(ctx, c, checks, at, reqs)
	if err != nil {
		return nil, err
	}
	decs, err := decideRequests(ctx, d.Limiter, reqs)
	if err != nil {
		d.Outstanding.release(ctx, c.ID, holds...)
		return nil, err
	}
	for k, dec := range decs {
		i := at[k]
		out[i].reply, out[i].reset = checks[i].reply(dec), ceilSeconds(dec.ResetAfter)
		if h := reqs[k].Hold; h != nil {
			d.reserved(ctx, m, c, checks[i], h.ID, dec, &out[i].reply)
		}
	}
	for _, o := range out {
		alg := string(o.check.limit.Algorithm)
		d.Usage.Record(c.ID, o.check.identifier, alg, o.reply.Allowed)
		outcome := "allowed"
		switch {
		case o.reply.Exempted:
			outcome = "exempt"
		case !o.reply.Allowed:
			outcome = "rejected"
		}
		m.decisions.WithLabelValues("rest", alg, o.check.limit.Accuracy.String(), outcome).Inc()
	}
	return out, nil
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
		Override:   ch.override,
		Warning:    float64(dec.Remaining) < ch.threshold*float64(dec.Limit),
		Reason:     reasonWithinLimit,
	}
	if !dec.Allowed {
		reply.RetryAfter = max(ceilSeconds(dec.RetryAfter), 1)
		reply.Reason = reasonRateLimited
	}
	if dec.Degraded {
		reply.Reason = reasonFailurePolicy
	}
	return reply
}

// exemptReply is the reply to ch when its identifier is exempt: allowed,
// with the whole limit remaining, and nothing counted.
func (ch check) exemptReply(now time.Time) checkReply {
	return checkReply{
		Allowed: true, Exempted: true, Identifier: ch.identifier,
		Limit: ch.limit.Limit, Remaining: ch.limit.Limit, ResetAt: ceilUnix(now),
		Algorithm: string(ch.limit.Algorithm), Rule: ch.rule, Override: ch.override, Reason: reasonExempt,
	}
}

// setCheckHeaders sets the rate-limit headers of one decision (the sets
// that sets chooses), and RateLimit-Degraded when the failure policy
// decided. An exempt reply has no reset in its headers: nothing was
// counted.
func setCheckHeaders(h http.Header, sets ratelimitheader.Sets, o decided) {
	ch, reply := o.check, o.reply
	lh := limitHeaders{
		policy: policyName(ch.rule, ch.limit), limit: ch.limit, remaining: reply.Remaining,
		resetAt: reply.ResetAt, reset: o.reset, retryAfter: reply.RetryAfter,
	}
	if reply.Exempted {
		lh.resetAt, lh.reset = 0, -1
	}
	setLimitHeaders(h, sets, lh)
	if sets.SendsX() {
		h.Set("X-RateLimit-Algorithm", reply.Algorithm)
		if reply.Warning {
			h.Set("X-RateLimit-Warning", "true")
		}
	}
	if reply.Reason == reasonFailurePolicy {
		h.Set(degradedHeader, "true")
	}
}

// checkDeps is what /check, /check/ip and /check/batch use.
type checkDeps struct {
	Cache          *store.Cache
	Usage          *store.UsageRecorder
	Limiter        algorithms.Store
	TrustedProxies []netip.Prefix
	HeaderSets     ratelimitheader.Sets
	Now            func() time.Time
	Reservations   ReservationLimits
	Outstanding    *outstanding // the reservations each client has made here
}

// holdReservations gives the requests of the checks with reserve_ttl (at:
// the check of each request) a hold of a new id each, and claims their
// places among their client's outstanding reservations; it returns their
// reservation ids.
func (d checkDeps) holdReservations(ctx context.Context, c store.Client, checks []check, at []int, reqs []algorithms.Request) ([]string, error) {
	var ids []string
	var ttls []time.Duration
	for k := range reqs {
		if ttl := checks[at[k]].reserveTTL; ttl > 0 {
			reqs[k].Hold = &algorithms.Hold{ID: newHoldID(), TTL: ttl}
			ids, ttls = append(ids, reservationID(c, checks[at[k]], reqs[k].Hold.ID)), append(ttls, ttl)
		}
	}
	return ids, d.Outstanding.claim(ctx, c.ID, ids, ttls)
}

// reserved writes to reply the reservation that ch's hold id made when
// dec kept it, and frees its place when it did not.
func (d checkDeps) reserved(ctx context.Context, m *metrics, c store.Client, ch check, id string, dec algorithms.Decision, reply *checkReply) {
	rid := reservationID(c, ch, id)
	if dec.HoldExpires.IsZero() {
		d.Outstanding.release(ctx, c.ID, rid)
		return
	}
	m.reservations.WithLabelValues("made").Inc()
	reply.ReservationID = rid
	reply.ReservationExpiresAt = dec.HoldExpires.UTC().Format(time.RFC3339Nano)
}

// decideRequests decides reqs (none is fine): an error comes back mapped for
// writeError (limiterError). A decision without a Limit gets its
// request's.
func decideRequests(ctx context.Context, limiter algorithms.Store, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	decs, err := limiter.Check(ctx, reqs)
	if err == nil && len(decs) != len(reqs) {
		err = fmt.Errorf("limiter returned %d decisions for %d requests", len(decs), len(reqs))
	}
	if err != nil {
		return nil, limiterError(err)
	}
	for i := range decs {
		if decs[i].Limit == 0 {
			decs[i].Limit = reqs[i].Limit.Limit
		}
	}
	return decs, nil
}

// checkOne decides one request, the way /register's own limit does: an
// error comes back mapped for writeError (limiterError).
func checkOne(ctx context.Context, limiter algorithms.Store, req algorithms.Request) (algorithms.Decision, error) {
	decs, err := decideRequests(ctx, limiter, []algorithms.Request{req})
	if err != nil {
		return algorithms.Decision{}, err
	}
	return decs[0], nil
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
