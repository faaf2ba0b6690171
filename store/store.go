// Package store keeps Throttle's clients, rules, exemptions and usage counts
// in SQLite (the embedded default, pure Go) or PostgreSQL (pgx). A DB reads
// and writes them (Open applies the embedded migrations); a Cache holds the
// copy the hot path reads, reloaded when any replica writes, and takes back
// from clients the domains the operator reserves (ReleaseReserved); a
// UsageRecorder counts decisions in memory and adds them in batches.
package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Errors callers branch on. Returned errors wrap them (errors.Is).
var (
	// ErrNotFound: no such client, rule or exemption (for this client).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique value is taken (client domain, rule name within
	// a client, exemption identifier within a client).
	ErrConflict = errors.New("already exists")
	// ErrDuplicateDescriptors: another rule of the client has the same
	// descriptors, which would make its Envoy domain ambiguous. It wraps
	// ErrConflict.
	ErrDuplicateDescriptors = fmt.Errorf("another rule has the same descriptors: %w", ErrConflict)
	// ErrInvalid: a field is missing or malformed (empty name, bad email, bad
	// domain, bad algorithm …). The message says which field. A rule's limit
	// refused by algorithms.Limit.Validate is also errors.Is
	// algorithms.ErrInvalid, with the engine's message.
	ErrInvalid = errors.New("invalid")
	// ErrUnavailable: the database cannot serve now — PostgreSQL down,
	// refusing or resetting connections, starting up or shutting down;
	// SQLite busy or locked by another connection — or it did not answer
	// (no pooled connection either) within Timeout. The error also wraps
	// the driver's. Trying again later may succeed.
	ErrUnavailable = errors.New("database unavailable")
)

// Client is a registered application. It owns rules, exemptions and counters,
// and the Envoy domain Domain.
type Client struct {
	ID               string               // UUID v4, set by CreateClient
	Name             string               // required, 1..100 chars
	Email            string               // required, must contain one '@'; stored lower-case, not unique
	Domain           string               // the Envoy domain the operator granted, unique; "" for none; [a-z0-9][a-z0-9._-]{0,99}
	DefaultAlgorithm algorithms.Algorithm // one of algorithms.Algorithms; default sliding_window
	CreatedAt        time.Time
}

// DescriptorEntry is one (key, value) of an Envoy descriptor match. An empty
// Value matches any value of Key; a Value with '*' is a wildcard.
type DescriptorEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// Rule is a named, reusable limit owned by a client.
type Rule struct {
	ClientID string
	Name     string // required, unique per client; [A-Za-z0-9_.:-]{1,100}
	// Limit is what the rule enforces, valid by algorithms.Limit.Validate,
	// with a Window of whole seconds. CreateRule and UpdateRule give a limit
	// without an Algorithm the client's DefaultAlgorithm, and drop a
	// RefillRate its algorithm does not use.
	Limit algorithms.Limit
	// AlwaysCount makes the limit count its hits even past the limit
	// (costs reported after the response): later requests are refused
	// until the window or the refill pays the debt back.
	AlwaysCount bool
	// RateLimits, when not empty, are the rule's limits given as a list:
	// several limits on the same descriptors (burst and sustained), all of
	// which must admit a request; only with Descriptors, at most
	// MaxRateLimits. Limit and AlwaysCount then hold those of
	// RateLimits[0].
	RateLimits []RuleLimit
	// Descriptors, when not empty, makes the rule apply to Envoy requests on
	// the client's domain whose descriptor matches these entries in order.
	Descriptors []DescriptorEntry
	// Reserve, optional, makes the rule's limits hold quota on Envoy's
	// request path and commit the real cost on its response path
	// (descriptors.Reserve); only with Descriptors.
	Reserve   *RuleReserve
	CreatedAt time.Time
}

// RuleReserve is a rule's reservation on Envoy's two calls: Hits held
// (1..each limit) for TTL (whole seconds, 1s..algorithms.MaxHoldTTL; the
// REST API bounds it by MAX_RESERVATION_TTL) under the value of the
// request's descriptor entry keyed Handle (not a key of the rule's
// descriptors).
type RuleReserve struct {
	Hits   int64
	TTL    time.Duration
	Handle string
}

// RuleLimit is one limit of a rule's RateLimits, checked as a rule's own
// Limit (a limit without an Algorithm takes the client's default).
type RuleLimit struct {
	// Name is optional; unique within the rule; [A-Za-z0-9_.:-]{1,100}. It
	// names the limit's policy in rate-limit headers.
	Name        string
	Limit       algorithms.Limit
	AlwaysCount bool
}

// Limits returns every limit of r: RateLimits, or the one of its fields.
func (r Rule) Limits() []RuleLimit {
	if len(r.RateLimits) > 0 {
		return r.RateLimits
	}
	return []RuleLimit{{Limit: r.Limit, AlwaysCount: r.AlwaysCount}}
}

// Exemption takes an identifier of a client out of rate limiting.
type Exemption struct {
	ClientID   string
	Identifier string // required, 1..256 chars
	Reason     string // optional, ≤ 1000 chars
	CreatedAt  time.Time
}

// Usage counts a client's /check decisions. ByAlgorithm counts every decision
// (allowed + rejected) per algorithm name.
type Usage struct {
	ClientID    string
	TotalChecks int64
	Allowed     int64
	Rejected    int64
	ByAlgorithm map[string]int64
}

// Snapshot is everything the hot path needs, read in one go by Cache.
type Snapshot struct {
	Revision   int64
	Clients    []ClientKey
	Rules      []Rule
	Exemptions []Exemption
	Overrides  []Override
	Keys       []Key
}

// ClientKey pairs a client with the SHA-256 hash of its API key.
type ClientKey struct {
	Client  Client
	KeyHash [32]byte
}
