// Package envoycounters is what the REST API's Envoy counters endpoint
// (restapi: read and reset the counters of Envoy descriptors) and the
// rate-limit service that owns those counters (ratelimitsvc) share: the
// descriptors asked about, what is answered, and the errors. The two front
// doors never import each other; cmd/throttle hands the service to the API.
package envoycounters

import (
	"errors"
	"fmt"
	"time"
)

// Entry is one (key, value) of a descriptor, as Envoy sends it.
type Entry struct {
	Key   string
	Value string
}

// Override is a descriptor's limit override, as Envoy sends it.
type Override struct {
	RequestsPerUnit uint32
	// Unit is the unit's name, SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or
	// YEAR (any case).
	Unit string
	// UnitMultiplier is the number of units in the window; 0 means 1.
	UnitMultiplier uint32
}

// Descriptor is one descriptor whose counters are read or reset: the same
// as a descriptor of an Envoy request, so it is matched exactly as
// ShouldRateLimit matches that request's.
type Descriptor struct {
	Entries []Entry
	Limit   *Override
}

// Source is where a domain's limits come from.
type Source int

const (
	// NoLimits: neither the YAML nor a client's descriptor rules limit the
	// domain.
	NoLimits Source = iota
	// YAML: the descriptor YAML (DESCRIPTORS_DIR), which wins over rules.
	YAML
	// Rules: the descriptor rules of the REST client that owns the domain.
	Rules
)

// Limit is one limit of a descriptor and, when read, its counter.
type Limit struct {
	Name            string
	RequestsPerUnit uint32
	// Unit is the unit's name (SECOND, …), or "" when the window is no
	// whole number of units.
	Unit           string
	UnitMultiplier uint32
	Window         time.Duration
	Algorithm      string
	AlwaysCount    bool
	// Remaining is how many more hits would be admitted now, and
	// ResetAfter how long until the state is fresh again; set by a read.
	Remaining  int64
	ResetAfter time.Duration
}

// Counters are the counters of one descriptor.
type Counters struct {
	// Matched reports whether a limit applies to the descriptor; when not,
	// Limits is empty.
	Matched bool
	// Unlimited: the descriptor is matched by an unlimited limit, which
	// has no counter.
	Unlimited bool
	// ShadowMode: the descriptor's limits decide and count but never deny.
	ShadowMode bool
	// Key names the descriptor as configured: its stats key without the
	// domain.
	Key string
	// Limits are the descriptor's limits, in configuration order.
	Limits []Limit
}

var (
	// ErrNoLimits: the domain has no limits (see NoLimits).
	ErrNoLimits = errors.New("neither the descriptor YAML nor a client's rules with descriptors limit it")
	// ErrInvalid marks descriptors that cannot be matched: none, too many,
	// an entry without a key, a bad override. Its errors say why.
	ErrInvalid = errors.New("invalid descriptors")
)

// Invalidf returns an error wrapping ErrInvalid whose message is only the
// reason, ready to show.
func Invalidf(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

type invalidError string

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }
