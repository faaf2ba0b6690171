// Package algorithms is Throttle's rate-limit engine: the limit, request and
// decision types, the Store contract, the decision arithmetic every store
// applies (decide.go; DecideFound for a backend that reads and counts), and
// the memory store (one process, sharded locks). The Redis store, which
// shares one limit among replicas, is package redisstore below this one;
// package storetest is the conformance suite both stores pass.
//
// Four algorithms decide a request of cost hits against a limit:
//
//   - FixedWindow: time is cut into windows of length Window aligned to the
//     Unix epoch. A window admits at most Limit hits; the count starts from zero
//     when the next window begins. A burst at a boundary can admit up to 2×Limit
//     within a short span (the known weakness of the algorithm).
//
//   - SlidingWindow: like FixedWindow, but a request also sees the previous
//     window's count weighted by how much of it still overlaps the sliding
//     window ending now: used = previous × (1 − elapsed/Window) + current.
//     A request is admitted when used + hits ≤ Limit. This approximates an
//     exact sliding log: it assumes the previous window's traffic was spread
//     evenly. In the worst case (all of the previous window's hits at its very
//     end) a span of length Window can hold up to 2×Limit−1 admitted hits; for
//     traffic spread over the window it stays within a few percent of Limit.
//     docs/algorithms.md has the measured figures.
//
//   - TokenBucket: a bucket of capacity Limit holds tokens, refilled
//     continuously at RefillRate tokens per second (default Limit/Window, or
//     Limit/60 when no window is given). A request takes hits tokens; it is
//     admitted when that many tokens are there.
//
//   - GCRA, the generic cell rate algorithm: a token bucket of capacity
//     Limit refilled at Limit per Window, kept as one number (the theoretical
//     arrival time) and computed exactly; RefillRate does not apply.
//     docs/algorithms.md states its rule and proves what it guarantees.
//
// In all four a rejected request consumes nothing (unless it always counts,
// Request.AlwaysCount), hits = 0 reads the state without changing it (a
// peek), and negative hits give back what was used (a refund).
package algorithms

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Algorithm names a rate-limit algorithm. The string values are the ones the
// REST API and the descriptor YAML use.
type Algorithm string

// The algorithms Throttle implements.
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	TokenBucket   Algorithm = "token_bucket"
	GCRA          Algorithm = "gcra"
)

// Algorithms lists every algorithm, in documentation order. It is the one
// list of algorithms: ParseAlgorithm accepts exactly these, and Names spells
// them for every message that lists them.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket, GCRA}

// ParseAlgorithm returns the algorithm named s, or an error wrapping ErrInvalid.
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := Algorithm(s); slices.Contains(Algorithms, a) {
		return a, nil
	}
	return "", invalidf("algorithm %q is not one of %s", s, Names())
}

// Names returns the names of Algorithms for a message, in documentation
// order: "fixed_window, sliding_window, token_bucket or gcra".
func Names() string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

// ErrInvalid marks a request the engine refuses: a bad limit, window, refill
// rate, hits or key. Callers map it to a client error (HTTP 400, gRPC
// INVALID_ARGUMENT). The refusals are errors.Is ErrInvalid and say only
// their reason ("limit 0 must be between 1 and …"), ready to show.
var ErrInvalid = errors.New("invalid rate limit")

// invalidError is a refusal of kind ErrInvalid: its message is the reason.
type invalidError string

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error { return invalidError(fmt.Sprintf(format, args...)) }

// Bounds on a limit. They keep every number the engine computes exact in a
// float64 (and so in Redis Lua) and refuse values no real policy needs.
const (
	MaxLimit      = 1_000_000_000_000 // requests per window / bucket capacity
	MaxWindow     = 366 * 24 * time.Hour
	MinWindow     = time.Millisecond
	MaxRefillRate = 1_000_000_000 // tokens per second
)

// DefaultTokenBucketWindow is the window used to derive a token bucket's
// refill rate when neither a refill rate nor a window is given: Limit/60 per
// second, as the product description says.
const DefaultTokenBucketWindow = time.Minute

// Limit says how much traffic one identifier may send.
type Limit struct {
	// Algorithm is required.
	Algorithm Algorithm
	// Limit is required: requests per window, or the bucket's capacity
	// (GCRA: both); 1..MaxLimit.
	Limit int64
	// Window is the window length, MinWindow..MaxWindow. Required for the
	// window algorithms and GCRA; optional for TokenBucket, where it only
	// derives the default refill rate.
	Window time.Duration
	// RefillRate is TokenBucket's refill in tokens per second. Optional:
	// 0 means Limit/Window (Limit/60 without a window). Ignored by the window
	// algorithms and GCRA (whose rate is Limit/Window).
	RefillRate float64
	// Accuracy is Exact (the default, "") or Approximate: see Accuracy.
	Accuracy Accuracy
	// Global says the limit is one budget for every region: counted in
	// the global Redis (GLOBAL_REDIS_URL) and decided from memory in each
	// replica of each region, with leases from it (so Accuracy must be
	// Approximate); false (scope "regional", the default) counts it where
	// every other limit is. See ParseScope.
	Global bool
}

// fmtWindow writes a window as people give it: days, seconds, or finer.
func fmtWindow(d time.Duration) string {
	switch {
	case d != 0 && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// Validate reports why l cannot be enforced, as an error wrapping ErrInvalid.
func (l Limit) Validate() error {
	if _, err := ParseAlgorithm(string(l.Algorithm)); err != nil {
		return err
	}
	if l.Limit <= 0 || l.Limit > MaxLimit {
		return invalidf("limit %d must be between 1 and %d", l.Limit, int64(MaxLimit))
	}
	if _, err := ParseAccuracy(string(l.Accuracy)); err != nil {
		return err
	}
	if l.Global && l.Accuracy != Approximate {
		return invalidf("scope global is decided from memory with leases of the global budget: its accuracy is approximate, not %s (an exact global limit would wait on the global Redis for every decision)", l.Accuracy)
	}
	if l.Accuracy == Approximate && l.Algorithm != FixedWindow && l.Algorithm != SlidingWindow {
		return invalidf("accuracy approximate applies to fixed_window and sliding_window, not %s (whose every decision must read and write the shared state)", l.Algorithm)
	}
	needWindow := l.Algorithm != TokenBucket
	if l.Window != 0 || needWindow {
		if l.Window < MinWindow || l.Window > MaxWindow {
			return invalidf("window %s must be between %s and %s", fmtWindow(l.Window), MinWindow, fmtWindow(MaxWindow))
		}
	}
	if l.Algorithm == GCRA {
		// Counted exactly in integers below 2^53 (see gcraUnits).
		if _, c := gcraUnits(l.Limit, l.Window.Microseconds()); c > maxExact/l.Limit {
			return invalidf("gcra cannot count limit %d per %s exactly (the least common multiple of the limit and the window in µs must be below 2^53): choose a rounder limit or window", l.Limit, fmtWindow(l.Window))
		}
	}
	if l.Algorithm == TokenBucket {
		r := l.RefillRate
		if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > MaxRefillRate {
			return invalidf("refill_rate %v must be a number between 0 and %d tokens per second", r, int64(MaxRefillRate))
		}
		if rate := l.Refill(); rate < 1e-9 {
			return invalidf("refill rate %v tokens per second is too small", rate)
		}
	}
	return nil
}

// Refill returns the token bucket's refill rate in tokens per second with the
// defaults applied.
func (l Limit) Refill() float64 {
	if l.RefillRate > 0 {
		return l.RefillRate
	}
	w := l.Window
	if w <= 0 {
		w = DefaultTokenBucketWindow
	}
	return float64(l.Limit) / w.Seconds()
}

// Key names the state of one limit on one identifier. Two requests share
// state exactly when their keys (and algorithms) are equal.
type Key struct {
	// Scope is the tenant: a client id, or an Envoy domain. Required.
	Scope string
	// Identifier is who is limited: a user id, an IP, a descriptor value. Required.
	Identifier string
	// Name tells apart the limits applied to one identifier, such as a rule
	// name or a descriptor path. Empty means the limit itself (algorithm,
	// limit, window, refill rate) names it, so different inline limits never
	// share a counter.
	Name string
}

// Request asks whether Hits more units of traffic are allowed under Limit.
type Request struct {
	Key   Key
	Limit Limit
	// Hits is the cost. 0 reads the state without changing it; a negative
	// cost is a refund: it gives back up to -Hits of what the identifier
	// used in the current window or bucket (a window's count never goes
	// below zero, a bucket never past full, a GCRA's TAT never before now),
	// is always allowed, and counts nothing.
	Hits int64
	// Unindexed says the key is never Reset (the Envoy path's domain-scoped
	// counters: no API resets them), so the Redis store keeps no index
	// entry for it — three Redis calls fewer each time a window or bucket
	// starts. Reset does not find such a state (Clear does); its TTL still
	// ends it.
	Unindexed bool
	// Counting is how a store may count the hits: Atomic (the default) or
	// CountThenRefund. See Counting.
	Counting Counting
	// AlwaysCount charges Hits even when they are over the limit (costs
	// reported after the response, Envoy's apply_on_stream_done): the count
	// goes past the limit — a token bucket's tokens or a GCRA's budget below
	// zero (a GCRA's debt stops at 2^53 of its units) — and later requests
	// are refused until the window or the refill pays it back.
	// Decision.Allowed still says whether the hits were within the limit.
	AlwaysCount bool
	// AllOrNothing ties the request to every other AllOrNothing request of
	// the same Check call: they count only if every one of them is within
	// its limit (an AlwaysCount request among them counts anyway, and its
	// being over still voids the others). Requests without it (shadow mode)
	// are decided on their own. Atomic where the keys share a Redis node;
	// across Redis Cluster masters, what one master counted is refunded
	// when another's request was over (between the two, another request can
	// see the count that is then refunded).
	AllOrNothing bool
	// Hold, when set, keeps the hits as a hold (a reservation) once they
	// are admitted and counted: see Hold and Settle. A hold is decided
	// exactly, on an approximate limit too.
	Hold *Hold
}

// Counting is the consistency regime of a request: how a store may count
// its hits. It matters only to a backend shared by replicas (Redis); the
// memory store always decides atomically.
type Counting uint8

const (
	// Atomic reads the state, decides and counts as one step (a Redis
	// function): another request sees either none of the hits or the
	// decided ones. The default.
	Atomic Counting = iota
	// CountThenRefund may count first and take back after: the hits are
	// added with one plain command (Redis INCRBY or SET NX, no script), the
	// decision is made on the count that command returns, and what must not
	// stay counted (hits over the limit, a void all-or-nothing group) is
	// refunded before Check returns. No request is ever admitted past its
	// limit, but for the length of that refund another request can see
	// hits that are then taken back, and be refused although it would have
	// fit. It costs Redis a third of a script call's work. It applies to
	// fixed and sliding windows of Unindexed requests (the Envoy service's
	// counters); the Redis store counts every other request atomically.
	CountThenRefund
)

// Validate reports why r cannot be decided, as an error wrapping ErrInvalid.
func (r Request) Validate() error {
	if r.Key.Scope == "" {
		return invalidf("empty scope")
	}
	if r.Key.Identifier == "" {
		return invalidf("empty identifier")
	}
	if r.Hits < -MaxLimit || r.Hits > MaxLimit {
		return invalidf("hits %d must be between %d and %d", r.Hits, -int64(MaxLimit), int64(MaxLimit))
	}
	if r.Hold != nil {
		if err := r.Hold.validate(r.Hits); err != nil {
			return err
		}
	}
	return r.Limit.Validate()
}

// Decision is the engine's answer to one Request.
type Decision struct {
	// Allowed is true when the hits were within the limit: admitted, and
	// counted unless Counted says otherwise.
	Allowed bool
	// Counted is true when the hits were counted: allowed and not voided
	// by another request of an all-or-nothing group, or AlwaysCount.
	Counted bool
	// Limit is the limit that applied (Request.Limit.Limit).
	Limit int64
	// Remaining is how many more hits would be admitted now, ≥ 0.
	Remaining int64
	// ResetAfter is how long until the state is fresh again: the end of the
	// current window, or until the bucket is full.
	ResetAfter time.Duration
	// RetryAfter is, for a rejected request, how long until the same request
	// could be admitted; 0 when allowed. A request of more hits than the limit
	// can never be admitted; its RetryAfter is ResetAfter.
	RetryAfter time.Duration
	// Now is the store's clock when it decided (Redis TIME for the Redis store).
	Now time.Time
	// Degraded is true when Guard's failure policy decided instead of the
	// counter backend (FAILURE_MODE).
	Degraded bool
	// Cached is true when the over-limit cache (redisstore/overlimit)
	// rejected the request without the backend (a rejection the backend
	// would have made too).
	Cached bool
	// HoldExpires is when the hold the request made expires (Request.Hold,
	// when its hits were counted); zero otherwise.
	HoldExpires time.Time
}

// ResetAt returns the moment the state is fresh again.
func (d Decision) ResetAt() time.Time { return d.Now.Add(d.ResetAfter) }

// Store decides requests and forgets identifiers. The Redis store and MemoryStore
// implement it with the same results.
type Store interface {
	// Check decides every request of the batch, in order: len(result) ==
	// len(reqs). A request that fails validation fails the whole batch with
	// an error wrapping ErrInvalid, before anything is counted.
	Check(ctx context.Context, reqs []Request) ([]Decision, error)
	// Reset deletes the state of every limit on (scope, identifier), or only
	// those of algorithm alg when alg is not empty, and returns how many
	// limits' states it deleted. Other identifiers are untouched.
	Reset(ctx context.Context, scope, identifier string, alg Algorithm) (int, error)
	// Clear deletes the state of each request's (Key, Limit) — what Check
	// of that request reads and writes — indexed or not, and returns how
	// many existed. (The Envoy path's counters have no index: a REST reset
	// of one works out the same Key and Limit as ShouldRateLimit does.)
	Clear(ctx context.Context, reqs []Request) (int, error)
	// Settle settles holds (see Hold and Settle): len(result) ==
	// len(sts), in order. A settle that fails validation fails the whole
	// batch with an error wrapping ErrInvalid, before anything is settled.
	Settle(ctx context.Context, sts []Settle) ([]SettleResult, error)
	// Held returns, for each request, the hits that unexpired, unsettled
	// holds keep on its (Key, Limit): those counted in its current window
	// (fixed and sliding window; a sliding window's holds of the window
	// before weigh in its estimate but are not listed) or in its bucket.
	// They are part of what Check counts as used. It counts nothing.
	Held(ctx context.Context, reqs []Request) ([]int64, error)
}

// ValidateBatch checks every request of a batch, as a Store does before it
// counts anything, and names the first bad one by its position.
func ValidateBatch(reqs []Request) error {
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	return nil
}
