package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// How a rule is stored: a row read back into a Rule, and its limits
// (rate_limits, reserve) written as JSON columns.

func scanRule(row rowScanner) (Rule, error) {
	var (
		r           Rule
		algorithm   string
		accuracy    string
		scope       string
		windowSecs  int64
		rateLimits  string
		descriptors string
		reserve     string
	)
	if err := row.Scan(&r.ClientID, &r.Name, &algorithm, &r.Limit.Limit, &windowSecs, &r.Limit.RefillRate, &accuracy, &scope, &r.AlwaysCount, &rateLimits, &descriptors, &reserve, timeScanner{&r.CreatedAt}); err != nil {
		return Rule{}, err
	}
	if reserve != "" {
		var v storedReserve
		if err := json.Unmarshal([]byte(reserve), &v); err != nil {
			return Rule{}, fmt.Errorf("rule %q: decode reserve: %w", r.Name, err)
		}
		r.Reserve = &RuleReserve{Hits: v.Hits, TTL: time.Duration(v.TTLSeconds) * time.Second, Handle: v.Handle}
	}
	r.Limit.Algorithm = algorithms.Algorithm(algorithm)
	r.Limit.Window = time.Duration(windowSecs) * time.Second
	var err error
	if r.Limit.Accuracy, err = algorithms.ParseAccuracy(accuracy); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if r.Limit.Global, err = algorithms.ParseScope(scope); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if descriptors != "" && descriptors != "[]" {
		if err := json.Unmarshal([]byte(descriptors), &r.Descriptors); err != nil {
			return Rule{}, fmt.Errorf("rule %q: decode descriptors: %w", r.Name, err)
		}
	}
	if rateLimits != "" && rateLimits != "[]" {
		var stored []storedLimit
		if err := json.Unmarshal([]byte(rateLimits), &stored); err != nil {
			return Rule{}, fmt.Errorf("rule %q: decode rate_limits: %w", r.Name, err)
		}
		r.RateLimits = make([]RuleLimit, len(stored))
		for i, l := range stored {
			r.RateLimits[i] = l.ruleLimit()
		}
	}
	return r, nil
}

// storedReserve is a RuleReserve in the reserve column.
type storedReserve struct {
	Hits       int64  `json:"hits"`
	TTLSeconds int64  `json:"ttl_seconds"`
	Handle     string `json:"handle"`
}

// storedLimit is a RuleLimit in the rate_limits column.
type storedLimit struct {
	Name          string  `json:"name,omitempty"`
	Algorithm     string  `json:"algorithm"`
	Limit         int64   `json:"limit"`
	WindowSeconds int64   `json:"window_seconds"`
	RefillRate    float64 `json:"refill_rate,omitempty"`
	AlwaysCount   bool    `json:"always_count,omitempty"`
	// Accuracy is "approximate", or left out (exact).
	Accuracy string `json:"accuracy,omitempty"`
	// Scope is "global", or left out (regional).
	Scope string `json:"scope,omitempty"`
}

func (l storedLimit) ruleLimit() RuleLimit {
	return RuleLimit{Name: l.Name, AlwaysCount: l.AlwaysCount, Limit: algorithms.Limit{
		Algorithm: algorithms.Algorithm(l.Algorithm), Limit: l.Limit, Window: time.Duration(l.WindowSeconds) * time.Second, RefillRate: l.RefillRate,
		Accuracy: algorithms.Accuracy(l.Accuracy), Global: l.Scope == algorithms.ScopeGlobal,
	}}
}

// encodeRateLimits is the rate_limits column of limits.
func encodeRateLimits(limits []RuleLimit) (string, error) {
	stored := make([]storedLimit, len(limits))
	for i, l := range limits {
		stored[i] = storedLimit{Name: l.Name, Algorithm: string(l.Limit.Algorithm), Limit: l.Limit.Limit, WindowSeconds: windowSeconds(l.Limit),
			RefillRate: l.Limit.RefillRate, AlwaysCount: l.AlwaysCount, Accuracy: string(l.Limit.Accuracy)}
		if l.Limit.Global {
			stored[i].Scope = algorithms.ScopeGlobal
		}
	}
	b, err := json.Marshal(stored)
	return string(b), err
}
