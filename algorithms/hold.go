package algorithms

import "time"

// Holds: quota held for a time, then committed or given back (a
// reservation). A Request with a Hold that is admitted and counted keeps
// its hits as a hold in the store, beside the counter, with an expiry: they
// count against the limit like admitted hits until the hold is settled.
// Settling commits what was really used (more or less than was held) and
// gives the rest back; a hold nobody settles gives itself back when it
// expires, in the store, whoever made it.

// MaxHoldTTL bounds a hold's TTL: quota held longer than this is a
// budget, not a reservation.
const MaxHoldTTL = 24 * time.Hour

// Hold asks the store to keep a request's admitted hits as a hold.
type Hold struct {
	// ID names the hold among the holds of the same counter (Key and
	// Limit): a REST reservation's id, or an Envoy request's handle value.
	// Required.
	ID string
	// TTL is how long the hold lasts unsettled: (0, MaxHoldTTL].
	TTL time.Duration
}

// Settle settles one hold: the hold ID of the counter of Request's Key and
// Limit. Request.Hits is what is committed (≥ 0): the hold's hits are
// replaced by it — what was held and not used is given back, and what was
// used past the hold is counted as a cost after the response is (always
// counted). Cancel gives the whole hold back (Hits is ignored).
type Settle struct {
	Request Request
	ID      string
	Cancel  bool
}

// SettleOutcome is what settling found.
type SettleOutcome uint8

const (
	// Settled: the hold was there; it is settled now.
	Settled SettleOutcome = iota + 1
	// AlreadySettled: the hold was settled before (committed or
	// cancelled); nothing changed.
	AlreadySettled
	// Expired: the hold expired before it was settled, and gave itself
	// back; nothing was counted.
	Expired
	// UnknownHold: no hold of that ID is known on that counter (never
	// made, or forgotten after its counter's window ended).
	UnknownHold
)

// SettleResult is the store's answer to one Settle.
type SettleResult struct {
	Outcome SettleOutcome
	// Held is what the hold held when it was settled (Settled only).
	Held int64
	// Decision is the state of the counter after the settlement (Settled
	// only), as a Check of 0 hits would read it.
	Decision Decision
}
