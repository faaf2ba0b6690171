package descriptors

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// RateLimit is a limit as configured: a descriptor's rate_limit, or a rule's
// limit.
type RateLimit struct {
	// RequestsPerUnit is the number of requests allowed per Unit. 0 is
	// allowed and means every request is over the limit (a ban); see
	// AlwaysOverLimit.
	RequestsPerUnit uint32
	// Unit is the window. Required unless Unlimited (or Window is set).
	Unit Unit
	// UnitMultiplier is how many Units one window lasts: 5 with Minute is a
	// 5-minute window, in which RequestsPerUnit requests are allowed. 0
	// means 1. The field Envoy's v3 API carries on
	// RateLimitResponse.RateLimit and on a request's limit override; in the
	// YAML it is Throttle's extension (unit_multiplier).
	UnitMultiplier uint32
	// Window, optional, overrides Unit and UnitMultiplier. Only rules built
	// from Go values use it (REST rules carry arbitrary windows, and set
	// Unit and UnitMultiplier to match where a unit divides it); YAML always
	// sets Unit.
	Window time.Duration
	// Unlimited means the descriptor is never limited (and never counted).
	Unlimited bool
	// Name is optional; other limits name it in Replaces.
	Name string
	// Replaces lists names of limits this one replaces when both match one
	// request (see ApplyReplaces).
	Replaces []string
	// Algorithm is Throttle's extension; empty means FixedWindow, as
	// upstream counts.
	Algorithm algorithms.Algorithm
	// RefillRate is the token bucket's refill in tokens per second; 0 means
	// RequestsPerUnit per window. Only with Algorithm TokenBucket.
	RefillRate float64
	// AlwaysCount makes the limit count its hits even when they are over it
	// (costs reported after the response: Envoy's apply_on_stream_done, LLM
	// tokens in hits_addend), so the budget goes below zero and later
	// requests are refused until the window or the refill pays it back
	// (algorithms.Request.AlwaysCount says what that means for each
	// algorithm). Throttle's extension (always_count); not with Unlimited.
	AlwaysCount bool
	// Accuracy is Throttle's extension (accuracy: exact or approximate);
	// empty means exact. Approximate limits are decided from memory and
	// synced to Redis in the background (algorithms.Approximate); fixed
	// and sliding windows only.
	Accuracy algorithms.Accuracy
	// Global is Throttle's extension scope (scope: global; regional, the
	// default, is false): one budget for every region, counted in the
	// global Redis (algorithms.Limit.Global). Accuracy must then be
	// Approximate, so fixed and sliding windows only; not with Unlimited.
	Global bool
	// Reserve, optional, makes the limit hold quota on Envoy's request
	// path and commit the real cost on its response path (Throttle's
	// extension, reserve: see Reserve). Not with Unlimited or a
	// requests_per_unit of 0.
	Reserve *Reserve
	// Rule names the REST rule (of one limit) this limit was built from,
	// whose per-identifier overrides apply to it; empty for the YAML.
	Rule string
}

// AlwaysOverLimit reports whether every request is over the limit: a limited
// (not Unlimited) rate of 0 requests per unit. The engine refuses a limit of
// 0, so a caller answers OVER_LIMIT without asking it.
func (l RateLimit) AlwaysOverLimit() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// WindowLength returns the window: Window when set, else Unit's length
// times UnitMultiplier.
func (l RateLimit) WindowLength() time.Duration {
	if l.Window > 0 {
		return l.Window
	}
	u, m := l.Unit.Window(), time.Duration(l.Multiplier())
	if u > 0 && m > math.MaxInt64/u {
		return math.MaxInt64 // far past algorithms.MaxWindow: refused by validation
	}
	return u * m
}

// Multiplier returns UnitMultiplier with its default applied: at least 1.
func (l RateLimit) Multiplier() uint32 { return max(l.UnitMultiplier, 1) }

// EngineAlgorithm returns the algorithm with the default applied.
func (l RateLimit) EngineAlgorithm() algorithms.Algorithm {
	if l.Algorithm == "" {
		return algorithms.FixedWindow
	}
	return l.Algorithm
}

// EngineLimit converts l to the engine's limit. It fails for a limit the
// engine does not enforce: Unlimited, or AlwaysOverLimit.
func (l RateLimit) EngineLimit() (algorithms.Limit, error) {
	if l.Unlimited {
		return algorithms.Limit{}, fmt.Errorf("unlimited has no engine limit: %w", ErrInvalid)
	}
	if l.AlwaysOverLimit() {
		return algorithms.Limit{}, fmt.Errorf("requests_per_unit 0 is always over the limit: %w", ErrInvalid)
	}
	el := algorithms.Limit{
		Algorithm:  l.EngineAlgorithm(),
		Limit:      int64(l.RequestsPerUnit),
		Window:     l.WindowLength(),
		RefillRate: l.RefillRate,
		Accuracy:   l.Accuracy,
		Global:     l.Global,
	}
	return el, el.Validate()
}

// validate checks l, a rule's limit, in upstream's words where upstream has
// them. Build runs the same two checks on a File's limits, checkUnit on the
// unit it reads and checkSettings once everything is well-formed.
func (l RateLimit) validate() error {
	if err := l.checkUnit(strings.ToLower(l.Unit.String())); err != nil {
		return err
	}
	if err := l.checkSettings(); err != nil {
		return err
	}
	if l.Reserve != nil {
		// The REST API bounds the TTL by MAX_RESERVATION_TTL itself.
		return l.Reserve.check(l, algorithms.MaxHoldTTL)
	}
	return nil
}

// checkUnit checks that l has a unit (or a Window), and none when
// Unlimited. written is the unit as configured, for the message.
func (l RateLimit) checkUnit(written string) error {
	switch {
	case l.Unlimited && (l.Unit != UnitUnknown || l.Window != 0 || l.UnitMultiplier != 0):
		return errors.New("should not specify rate limit unit when unlimited")
	case !l.Unlimited && l.Unit.Window() == 0 && l.Window <= 0:
		return unitError(written)
	}
	return nil
}

// checkSettings checks everything of l but its unit: replaces, algorithm,
// accuracy, scope, refill_rate, always_count, and that the engine takes the limit (whose
// window, unit times unit_multiplier, must be at most 366 days).
func (l RateLimit) checkSettings() error {
	for _, r := range l.Replaces {
		if r == "" {
			return errors.New("should not have an empty replaces entry")
		}
		if r == l.Name {
			return errors.New("replaces should not contain name of same descriptor")
		}
	}
	if l.Algorithm != "" {
		if _, err := algorithms.ParseAlgorithm(string(l.Algorithm)); err != nil {
			return fmt.Errorf("unknown algorithm '%s' (want %s)", l.Algorithm, algorithms.Names())
		}
	}
	if _, err := algorithms.ParseAccuracy(string(l.Accuracy)); err != nil {
		return fmt.Errorf("unknown accuracy '%s' (want exact or approximate)", l.Accuracy)
	}
	if err := l.checkScope(); err != nil {
		return err
	}
	if l.Accuracy == algorithms.Approximate && !l.Unlimited {
		if a := l.EngineAlgorithm(); a != algorithms.FixedWindow && a != algorithms.SlidingWindow {
			return fmt.Errorf("accuracy approximate is only for fixed_window and sliding_window, not %s: a %s decides on the state it reads and writes in one step", a, a)
		}
	}
	if l.RefillRate != 0 && l.Algorithm != algorithms.TokenBucket {
		return fmt.Errorf("refill_rate is only for algorithm token_bucket, not %s", l.EngineAlgorithm())
	}
	if r := l.RefillRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > algorithms.MaxRefillRate {
		return fmt.Errorf("refill_rate %v must be a number between 0 and %d tokens per second", r, int64(algorithms.MaxRefillRate))
	}
	if u := l.Unit.Window(); l.Window == 0 && u > 0 && l.Multiplier() > 1 && l.WindowLength() > algorithms.MaxWindow {
		return fmt.Errorf("unit_multiplier %d makes a window of %d %ss, longer than the longest window, %d days",
			l.UnitMultiplier, l.UnitMultiplier, strings.ToLower(l.Unit.String()), algorithms.MaxWindow/(24*time.Hour))
	}
	if l.Unlimited && l.AlwaysCount {
		return errors.New("always_count has no meaning for an unlimited limit, which counts nothing")
	}
	if l.Unlimited || l.AlwaysOverLimit() {
		return nil
	}
	_, err := l.EngineLimit()
	return err
}

// globalScopeUnavailable is the problem of a limit of scope global on
// a server without a global Redis (Options.GlobalScope false).
const globalScopeUnavailable = "scope: global needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none)"

// checkScope checks a limit of scope global: a fixed or sliding window,
// approximate, limited.
func (l RateLimit) checkScope() error {
	switch {
	case !l.Global:
		return nil
	case l.Unlimited:
		return errors.New("scope global has no meaning for an unlimited limit, which counts nothing")
	case l.EngineAlgorithm() != algorithms.FixedWindow && l.EngineAlgorithm() != algorithms.SlidingWindow:
		a := l.EngineAlgorithm()
		return fmt.Errorf("scope global is only for fixed_window and sliding_window, not %s: a global limit is decided from memory with leases of the global budget, and a %s decides on the state it reads and writes in one step", a, a)
	case l.Accuracy != algorithms.Approximate:
		return fmt.Errorf("scope global is decided from memory with leases of the global budget: its accuracy is approximate, not exact (leave accuracy out, or write approximate)")
	}
	return nil
}

// MaxLimitsPerDescriptor is the most limits one descriptor may have
// (rate_limits): each is a decision of its own, so a cap keeps one request
// from costing the counter backend without bound.
const MaxLimitsPerDescriptor = 16

// checkLimits checks the limits of one descriptor together, each already
// checked on its own: at most MaxLimitsPerDescriptor; unlimited only alone;
// names unique; no limit replacing another of the same descriptor; and no
// two that the engine would count as one (same algorithm, requests per
// unit, window and refill rate: they share a counter). It returns the index
// of the limit a problem is about.
func checkLimits(ls []RateLimit) (int, error) {
	if len(ls) > MaxLimitsPerDescriptor {
		return MaxLimitsPerDescriptor, fmt.Errorf("a descriptor has at most %d limits, not %d", MaxLimitsPerDescriptor, len(ls))
	}
	if len(ls) < 2 {
		return 0, nil
	}
	if i, err := checkReserves(ls); err != nil {
		return i, err
	}
	names := map[string]int{}
	engines := map[algorithms.Limit]int{}
	for i, l := range ls {
		if l.Unlimited {
			return i, errors.New("unlimited cannot be combined with other limits of the same descriptor")
		}
		if l.Name != "" {
			if j, ok := names[l.Name]; ok {
				return i, fmt.Errorf("name '%s' is already the name of rate_limits[%d]", l.Name, j)
			}
			names[l.Name] = i
		}
		if l.AlwaysOverLimit() {
			continue
		}
		el, err := l.EngineLimit()
		if err != nil {
			return i, err
		}
		el.Accuracy = algorithms.Exact // both accuracies count on one counter
		if j, ok := engines[el]; ok {
			return i, fmt.Errorf("same algorithm, requests_per_unit, window and refill_rate as rate_limits[%d]: the two would count against one counter", j)
		}
		engines[el] = i
	}
	for i, l := range ls {
		for _, r := range l.Replaces {
			if _, ok := names[r]; ok {
				return i, errors.New("replaces should not contain name of same descriptor")
			}
		}
	}
	return 0, nil
}
