package descriptors

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Reserve is a limit's reservation (Throttle's extension, reserve): how
// Envoy's two calls for one request hold quota and then pay for it, with
// no change to Envoy. A request descriptor that matches the limit and
// carries the entry named Handle is one of them:
//
//   - with hits_addend 0 (the request path's check, as Envoy AI Gateway
//     sends it), it holds Hits for TTL, under the handle entry's value
//     (an x-request-id), and is refused when they do not fit;
//   - with hits_addend N > 0 (the response path's apply_on_stream_done
//     call, same handle), it commits N in place of what was held.
//
// A second hits_addend 0 on a handle that holds quota commits 0: the
// whole hold is given back. The handle entry is never part of the counter:
// it is taken out of the descriptor before matching (see Domain.Match).
type Reserve struct {
	// Hits is what the request path holds: 1..the limit's requests_per_unit.
	Hits int64
	// TTL is how long a hold lasts uncommitted; it then gives itself
	// back: (0, MaxReservationTTL].
	TTL time.Duration
	// Handle is the key of the request entry whose value names the hold
	// (Envoy's request_headers action on x-request-id, say, with
	// descriptor_key request_id). Required.
	Handle string
}

// maxReservationTTL is opts' bound on a reservation's TTL.
func (o Options) maxReservationTTL() time.Duration {
	if o.MaxReservationTTL > 0 {
		return min(o.MaxReservationTTL, algorithms.MaxHoldTTL)
	}
	return algorithms.DefaultMaxHoldTTL
}

// check checks r, the reserve of limit l, against maxTTL.
func (r *Reserve) check(l RateLimit, maxTTL time.Duration) error {
	switch {
	case l.Unlimited:
		return errors.New("reserve has no meaning for an unlimited limit, which counts nothing")
	case l.AlwaysOverLimit():
		return errors.New("reserve has no meaning for requests_per_unit 0, which refuses every request")
	case r.Handle == "":
		return errors.New("reserve needs a handle: the key of the descriptor entry whose value names a request (as request_id)")
	case r.Hits < 1 || r.Hits > int64(l.RequestsPerUnit):
		return fmt.Errorf("reserve hits %d must be between 1 and the limit, %d", r.Hits, l.RequestsPerUnit)
	case r.TTL <= 0 || r.TTL%time.Second != 0:
		return fmt.Errorf("reserve ttl %s must be a whole number of seconds above 0", r.TTL)
	case r.TTL > maxTTL:
		return fmt.Errorf("reserve ttl %s is longer than MAX_RESERVATION_TTL, %s", r.TTL, maxTTL)
	}
	return nil
}

// checkReserves checks that the limits of one descriptor that reserve name
// one handle: a request's handle entry is taken out once, for all of them.
func checkReserves(ls []RateLimit) (int, error) {
	handle, first := "", -1
	for i, l := range ls {
		if l.Reserve == nil {
			continue
		}
		if first < 0 {
			handle, first = l.Reserve.Handle, i
			continue
		}
		if l.Reserve.Handle != handle {
			return i, fmt.Errorf("reserve handle '%s' is not rate_limits[%d]'s, '%s': the limits of one descriptor reserve under one handle", l.Reserve.Handle, first, handle)
		}
	}
	return 0, nil
}

// HandleKey returns the handle of the limits that reserve, or "".
func (m *Match) HandleKey() string {
	for _, l := range m.Limits {
		if l.Reserve != nil {
			return l.Reserve.Handle
		}
	}
	return ""
}

// noteHandles adds to d's handle keys those limits reserve under.
func (d *Domain) noteHandles(limits []RateLimit) {
	for _, l := range limits {
		if r := l.Reserve; r != nil && !slices.Contains(d.handles, r.Handle) {
			d.handles = append(d.handles, r.Handle)
		}
	}
}

// matchHandle matches entries without those whose key is a handle of the
// domain: a match whose limits reserve under one of those keys is the
// match, with Handle the value of that entry (the last one of that key).
// nil when there is no such entry or match.
func (d *Domain) matchHandle(entries []Entry) *Match {
	n := 0
	for _, e := range entries {
		if slices.Contains(d.handles, e.Key) {
			n++
		}
	}
	if n == 0 || n == len(entries) {
		return nil
	}
	kept := make([]Entry, 0, len(entries)-n)
	for _, e := range entries {
		if !slices.Contains(d.handles, e.Key) {
			kept = append(kept, e)
		}
	}
	m := d.match(kept)
	if m == nil {
		return nil
	}
	key := m.HandleKey()
	found := false
	for _, e := range entries {
		if e.Key == key {
			m.Handle, found = e.Value, true
		}
	}
	if !found {
		return nil
	}
	return m
}
