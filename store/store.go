// Package store keeps Throttle's clients, rules, exemptions and usage counts in
// SQLite (the embedded default, pure Go) or PostgreSQL (pgx), and caches them
// in memory so the hot path never reads the database.
//
// The API, in short (see each declaration for details):
//
//   - Open connects to "sqlite://PATH" or "postgres://…" and applies the
//     embedded migrations; Migrate runs "up", "down" or "version" by hand.
//   - *DB reads and writes clients, rules, exemptions and usage counts; every
//     write to clients, rules and exemptions bumps a revision counter.
//   - *Cache holds an immutable, lock-free copy of everything the hot path
//     needs and reloads it when the revision changes (on any replica).
//   - *UsageRecorder counts decisions in memory and adds them in batches.
package store

import (
	"errors"
	"fmt"
	"time"
)

// Errors callers branch on. Returned errors wrap them (errors.Is).
var (
	// ErrNotFound: no such client, rule or exemption (for this client).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique value is taken (client email or domain, rule name
	// within a client, exemption identifier within a client).
	ErrConflict = errors.New("already exists")
	// ErrDuplicateDescriptors: another rule of the client has the same
	// descriptors, which would make its Envoy domain ambiguous. It wraps
	// ErrConflict.
	ErrDuplicateDescriptors = fmt.Errorf("another rule has the same descriptors: %w", ErrConflict)
	// ErrInvalid: a field is missing or malformed (empty name, bad email, bad
	// domain, bad algorithm, limit ≤ 0 …). The message says which field.
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
	ID               string // UUID v4, set by CreateClient
	Name             string // required, 1..100 chars
	Email            string // required, unique (case-insensitive), must contain one '@'
	Domain           string // unique; defaults to a slug of Name ("My App!" → "my-app"); [a-z0-9][a-z0-9._-]{0,99}
	DefaultAlgorithm string // fixed_window | sliding_window | token_bucket | gcra; default sliding_window
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
	ClientID   string
	Name       string        // required, unique per client; [A-Za-z0-9_.:-]{1,100}
	Algorithm  string        // fixed_window | sliding_window | token_bucket | gcra
	Limit      int64         // > 0
	Window     time.Duration // whole seconds; required (> 0) for the window algorithms and gcra
	RefillRate float64       // token bucket tokens/second; 0 = default
	// AlwaysCount makes the limit count its hits even past the limit
	// (costs reported after the response): later requests are refused
	// until the window or the refill pays the debt back.
	AlwaysCount bool
	// RateLimits, when not empty, are the rule's limits given as a list:
	// several limits on the same descriptors (burst and sustained), all of
	// which must admit a request; only with Descriptors, at most
	// MaxRateLimits. Algorithm, Limit, Window, RefillRate and AlwaysCount
	// then hold those of RateLimits[0].
	RateLimits []RuleLimit
	// Descriptors, when not empty, makes the rule apply to Envoy requests on
	// the client's domain whose descriptor matches these entries in order.
	Descriptors []DescriptorEntry
	CreatedAt   time.Time
}

// RuleLimit is one limit of a rule's RateLimits, checked as a rule's own.
type RuleLimit struct {
	// Name is optional; unique within the rule; [A-Za-z0-9_.:-]{1,100}. It
	// names the limit's policy in rate-limit headers.
	Name        string
	Algorithm   string // empty: the client's default
	Limit       int64
	Window      time.Duration
	RefillRate  float64
	AlwaysCount bool
}

// Limits returns every limit of r: RateLimits, or the one of its fields.
func (r Rule) Limits() []RuleLimit {
	if len(r.RateLimits) > 0 {
		return r.RateLimits
	}
	return []RuleLimit{{Algorithm: r.Algorithm, Limit: r.Limit, Window: r.Window, RefillRate: r.RefillRate, AlwaysCount: r.AlwaysCount}}
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
}

// ClientKey pairs a client with the SHA-256 hash of its API key.
type ClientKey struct {
	Client  Client
	KeyHash [32]byte
}

/*
The *DB type offers:

	Open(ctx, databaseURL string, log *slog.Logger) (*DB, error)
	    databaseURL: "sqlite://PATH" (":memory:" not allowed), "sqlite:PATH",
	    "postgres://…", "postgresql://…". Applies pending migrations.
	(*DB).Close() error
	(*DB).Dialect() string                              // "sqlite" | "postgres"
	(*DB).Ping(ctx) error
	(*DB).RegisterMetrics(reg prometheus.Registerer) error      // pool statistics, throttle_store_unavailable_total

	Every operation below waits at most Timeout for the database; an error
	that says the database cannot serve now wraps ErrUnavailable.

	(*DB).CreateClient(ctx, c Client, keyHash [32]byte) (Client, error)
	(*DB).ClientByKeyHash(ctx, keyHash [32]byte) (Client, error)
	(*DB).ClientByID(ctx, id string) (Client, error)

	(*DB).CreateRule(ctx, r Rule) (Rule, error)         // ErrConflict on duplicate name; empty Algorithm = client's default
	(*DB).Rules(ctx, clientID string) ([]Rule, error)   // ordered by name
	(*DB).Rule(ctx, clientID, name string) (Rule, error)
	(*DB).UpdateRule(ctx, r Rule) (Rule, error)         // ErrNotFound, ErrDuplicateDescriptors; keeps CreatedAt
	(*DB).DeleteRule(ctx, clientID, name string) error  // ErrNotFound

	(*DB).CreateExemption(ctx, e Exemption) (Exemption, error) // ErrConflict on duplicate
	(*DB).Exemptions(ctx, clientID string) ([]Exemption, error) // ordered by identifier
	(*DB).Exemption(ctx, clientID, identifier string) (Exemption, error)
	(*DB).DeleteExemption(ctx, clientID, identifier string) error

	(*DB).AddUsage(ctx, deltas []Usage) error           // atomic increments, one transaction; one algorithm per delta
	(*DB).Usage(ctx, clientID string) (Usage, error)
	(*DB).TopIdentifiers(ctx, clientID string, n int) ([]IdentifierUsage, error)  // per-identifier counts, most checked first
	(*DB).PruneIdentifierUsage(ctx, before time.Time) (int64, error)

	(*DB).Revision(ctx) (int64, error)                  // bumped by every write above except AddUsage
	(*DB).Snapshot(ctx) (Snapshot, error)

Also: ValidAlgorithm(name) bool; the constants FixedWindow, SlidingWindow,
TokenBucket, GCRA, DialectSQLite, DialectPostgres.

Migrations: Migrate(ctx, databaseURL string, cmd string) (version uint, dirty bool, err error)
with cmd "up" | "down" (one step) | "version".

Cache (NewCache(db *DB, every time.Duration, log *slog.Logger) *Cache):
	(*Cache).Run(ctx) error            // polls Revision every `every`, reloads Snapshot on change; returns nil when ctx ends
	(*Cache).Refresh(ctx) error        // reload now (called after a local write so it is seen at once)
	(*Cache).ClientByKeyHash(h) (Client, bool)
	(*Cache).ClientByDomain(domain) (Client, bool)
	(*Cache).ClientByID(id) (Client, bool)
	(*Cache).Revision() int64             // of the loaded snapshot; -1 before the first load
	(*Cache).Rule(clientID, name) (Rule, bool)
	(*Cache).DescriptorRules(clientID) []Rule   // rules with Descriptors, in creation order
	(*Cache).Exempt(clientID, identifier) bool

Usage recorder (NewUsageRecorder(db *DB, every time.Duration, log *slog.Logger) *UsageRecorder):
	(*UsageRecorder).Record(clientID, identifier, algorithm string, allowed bool)   // lock-cheap, never blocks on the DB
	(*UsageRecorder).TopIdentifiers(ctx, clientID, n) ([]IdentifierUsage, error)  // DB + not yet flushed, most checked first
	(*UsageRecorder).Run(ctx) error      // flushes every `every`; on ctx end flushes once more (with its own short deadline) and returns
	(*UsageRecorder).Flush(ctx) error    // flush now; on failure the counts are kept for the next flush
	(*UsageRecorder).Usage(ctx, clientID) (Usage, error)   // DB + not yet flushed; failed flushes are kept and retried, never dropped
*/
