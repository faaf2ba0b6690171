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
	// Window, optional, overrides Unit's length. Only rules built from Go
	// values use it (REST rules carry arbitrary windows); YAML always sets
	// Unit.
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
}

// AlwaysOverLimit reports whether every request is over the limit: a limited
// (not Unlimited) rate of 0 requests per unit. The engine refuses a limit of
// 0, so a caller answers OVER_LIMIT without asking it.
func (l RateLimit) AlwaysOverLimit() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// WindowLength returns the window: Window when set, else Unit's length.
func (l RateLimit) WindowLength() time.Duration {
	if l.Window > 0 {
		return l.Window
	}
	return l.Unit.Window()
}

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
	}
	return el, el.Validate()
}

// validate checks l, a rule's limit, in upstream's words where upstream has
// them. The YAML parser runs the same two checks, checkUnit where it reads
// the unit and checkSettings once everything is read.
func (l RateLimit) validate() error {
	if err := l.checkUnit(strings.ToLower(l.Unit.String())); err != nil {
		return err
	}
	return l.checkSettings()
}

// checkUnit checks that l has a unit (or a Window), and none when
// Unlimited. written is the unit as configured, for the message.
func (l RateLimit) checkUnit(written string) error {
	switch {
	case l.Unlimited && (l.Unit != UnitUnknown || l.Window != 0):
		return errors.New("should not specify rate limit unit when unlimited")
	case !l.Unlimited && l.Unit.Window() == 0 && l.Window <= 0:
		return unitError(written)
	}
	return nil
}

// checkSettings checks everything of l but its unit: replaces, algorithm,
// refill_rate, and that the engine takes the limit.
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
	if l.RefillRate != 0 && l.Algorithm != algorithms.TokenBucket {
		return fmt.Errorf("refill_rate is only for algorithm token_bucket, not %s", l.EngineAlgorithm())
	}
	if r := l.RefillRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > algorithms.MaxRefillRate {
		return fmt.Errorf("refill_rate %v must be a number between 0 and %d tokens per second", r, int64(algorithms.MaxRefillRate))
	}
	if l.Unlimited || l.AlwaysOverLimit() {
		return nil
	}
	_, err := l.EngineLimit()
	return err
}
