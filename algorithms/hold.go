package algorithms

import (
	"fmt"
	"time"
)

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

// DefaultMaxHoldTTL is the longest a reservation may hold quota when the
// setting MAX_RESERVATION_TTL is not given: REST's reserve_ttl and the
// descriptors' and rules' reserve ttl alike.
const DefaultMaxHoldTTL = time.Minute

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
	// Cleared: the hold's counter was reset or cleared (Store.Reset,
	// Store.Clear) while the hold was held: its hits went with the
	// counter, and nothing was counted — the fresh counter never gets the
	// commit of a hold made before it.
	Cleared
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

// MaxHoldIDLen bounds a hold's ID, in bytes.
const MaxHoldIDLen = 256

// validate reports why h cannot be kept for a request of hits.
func (h *Hold) validate(hits int64) error {
	switch {
	case h.ID == "":
		return invalidf("a hold needs an id")
	case len(h.ID) > MaxHoldIDLen:
		return invalidf("a hold's id is longer than %d bytes", MaxHoldIDLen)
	case h.TTL <= 0 || h.TTL > MaxHoldTTL:
		return invalidf("a hold's ttl %s must be above 0 and at most %s", h.TTL, MaxHoldTTL)
	case hits <= 0:
		return invalidf("a hold needs hits above 0, not %d", hits)
	}
	return nil
}

// Validate reports why st cannot be settled, as an error wrapping
// ErrInvalid.
func (st *Settle) Validate() error {
	switch {
	case st.ID == "":
		return invalidf("a settle needs the hold's id")
	case len(st.ID) > MaxHoldIDLen:
		return invalidf("a hold's id is longer than %d bytes", MaxHoldIDLen)
	case st.Request.Hits < 0:
		return invalidf("a commit of %d hits: must be 0 or more", st.Request.Hits)
	case st.Request.Hold != nil:
		return invalidf("a settle's request makes no hold")
	}
	return st.Request.Validate()
}

// ValidateSettles checks every settle of a batch, as a Store does before it
// settles anything, and names the first bad one by its position.
func ValidateSettles(sts []Settle) error {
	for i := range sts {
		if err := sts[i].Validate(); err != nil {
			return fmt.Errorf("settle %d: %w", i, err)
		}
	}
	return nil
}

// HoldKeep is how long a hold's record outlives its expiry, settled or
// not, so that a late settle is told Expired or AlreadySettled rather
// than UnknownHold: its TTL, or its limit's window when longer.
func HoldKeep(l Limit, ttl time.Duration) time.Duration {
	return max(ttl, l.Window)
}

// Committed is how much a settle of a hold of held hits commits: hits,
// or none when it cancels.
func (st *Settle) Committed() int64 {
	if st.Cancel {
		return 0
	}
	return st.Request.Hits
}
