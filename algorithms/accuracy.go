package algorithms

// How closely a limit is kept across replicas (its accuracy) and where it
// is counted (its scope: this region's Redis, or the global Redis every
// region shares).

// ParseScope returns whether the limit scope named s is global: "global",
// or "regional" (or "") for false; else an error wrapping ErrInvalid.
func ParseScope(s string) (global bool, err error) {
	switch s {
	case "", ScopeRegional:
		return false, nil
	case ScopeGlobal:
		return true, nil
	}
	return false, invalidf("scope %q is not one of regional or global", s)
}

// The names of a limit's scope, as the YAML (scope:) and the REST API
// ("scope") give them.
const (
	ScopeRegional = "regional"
	ScopeGlobal   = "global"
)

// ScopeName names a limit's scope: ScopeGlobal or ScopeRegional.
func (l Limit) ScopeName() string {
	if l.Global {
		return ScopeGlobal
	}
	return ScopeRegional
}

// Accuracy says how closely a limit is kept across replicas.
type Accuracy string

const (
	// Exact decides every request on the shared count: no replica admits
	// past the limit. With Redis, every decision waits on it.
	Exact Accuracy = ""
	// Approximate decides from memory within a lease of the limit each
	// replica takes from Redis (Redis never grants past the limit what the
	// replicas admitted and hold), reports its hits and resizes its lease
	// in the background, and asks Redis at once when its lease runs out
	// (the Redis store; the memory store, one process, decides it
	// exactly). The error is bounded: docs/algorithms.md. Fixed and
	// sliding windows only.
	Approximate Accuracy = "approximate"
)

// ParseAccuracy returns the accuracy named s: "exact" (or "") or
// "approximate", or an error wrapping ErrInvalid.
func ParseAccuracy(s string) (Accuracy, error) {
	switch s {
	case "", "exact":
		return Exact, nil
	case string(Approximate):
		return Approximate, nil
	}
	return "", invalidf("accuracy %q is not one of exact or approximate", s)
}

// String names the accuracy as the YAML and the REST API do: "exact" or
// "approximate".
func (a Accuracy) String() string {
	if a == Exact {
		return "exact"
	}
	return string(a)
}
