package algorithms

import (
	"errors"
	"fmt"
)

// FailureMode says how a guarded store (redisstore.Guard) answers when its
// counter backend fails.
type FailureMode string

// The failure modes (setting FAILURE_MODE).
const (
	// FailOpen admits every request while the backend is down (the default,
	// as Envoy's own failure_mode_deny: false).
	FailOpen FailureMode = "open"
	// FailClosed rejects every request while the backend is down.
	FailClosed FailureMode = "closed"
	// FailLocal keeps enforcing with this replica's own memory counters
	// while the backend is down: each replica admits up to the limit.
	FailLocal FailureMode = "local"
)

// ParseFailureMode returns the mode named s.
func ParseFailureMode(s string) (FailureMode, error) {
	switch m := FailureMode(s); m {
	case FailOpen, FailClosed, FailLocal:
		return m, nil
	}
	return "", fmt.Errorf("failure mode %q is not one of open, closed, local", s)
}

// ErrOverloaded is a guarded store's answer when it could not get the backend's
// decision within the call's deadline while the backend itself was answering
// (Throttle, not the backend, was the bottleneck). Nothing is decided by the
// failure policy then: guessing would break the limit, so the caller is told
// to come back (REST 503 with Retry-After, gRPC UNAVAILABLE).
var ErrOverloaded = errors.New("overloaded: no decision from the counter backend within the deadline")
