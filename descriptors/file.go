package descriptors

import "github.com/throttle-rl/throttle/algorithms"

// File is one descriptor file as written, before Build checks it: the
// model of the reference service's format that a YAML file (Parse, Load)
// and an xDS RateLimitConfig (package xdsconfig) both become. Lines are
// where things start in a YAML file, for errors; 0 where there is none.
type File struct {
	// Name is where the file came from; errors name it.
	Name string
	// Domain is required.
	Domain string
	// Descriptors are the top-level descriptors, in file order.
	Descriptors []Descriptor
	// Line is where the file's top-level mapping starts: the line of
	// problems of the whole file.
	Line int
}

// Descriptor is one descriptor of a File, with upstream's fields.
type Descriptor struct {
	Key   string // required
	Value string // optional; '*' makes it a wildcard
	// RateLimit is the limit, or nil: no limit at this level.
	RateLimit *Limit
	// RateLimits are the limits of a descriptor with several (Throttle's
	// rate_limits: burst and sustained on one key), all of which must admit
	// a request; nil when it has none or RateLimit. A descriptor has one or
	// the other, never both.
	RateLimits     []Limit
	Descriptors    []Descriptor
	ShadowMode     bool
	DetailedMetric bool
	ShareThreshold bool
	ValueToMetric  bool
	QuotaMode      bool
	// Metadata is free-form; values are JSON-compatible (map[string]any,
	// []any, string, int, float64, bool, nil).
	Metadata map[string]any
	// Line is where the descriptor starts in the file.
	Line int
}

// Limit is a descriptor's rate_limit, or one of its rate_limits, as
// written: Build checks it and makes a RateLimit of it.
type Limit struct {
	// Unit is the unit's name (second, MINUTE, …; case-insensitive).
	// Required unless Unlimited, when it must be empty.
	Unit            string
	RequestsPerUnit uint32
	// UnitMultiplier is Throttle's unit_multiplier; 0 means 1.
	UnitMultiplier uint32
	Unlimited      bool
	Name           string
	// Replaces names the limits this one replaces.
	Replaces    []string
	Algorithm   algorithms.Algorithm // empty: fixed_window
	RefillRate  float64
	AlwaysCount bool
	// Accuracy is exact, approximate or empty: exact, or approximate
	// with Scope global.
	Accuracy string
	// Scope is regional, global or empty (regional).
	Scope   string
	Reserve *Reserve
	// Line is where the limit starts: the rate_limit key, or the entry of
	// rate_limits. ReserveLine is where its reserve key is.
	Line, ReserveLine int
}

// spec is the descriptor d with limits, before it joins the tree.
func (d Descriptor) spec(limits []RateLimit) nodeSpec {
	return nodeSpec{
		key:            d.Key,
		value:          d.Value,
		limits:         limits,
		shadowMode:     d.ShadowMode,
		detailedMetric: d.DetailedMetric,
		shareThreshold: d.ShareThreshold,
		valueToMetric:  d.ValueToMetric,
		quotaMode:      d.QuotaMode,
		metadata:       d.Metadata,
	}
}
