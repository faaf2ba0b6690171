package restapi

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// maxHeldCounters bounds the counters a client's usage (/stats/{client_id})
// lists under reservations.
const maxHeldCounters = 20

// reservationUsage is /stats/{client_id}'s view of the caller's outstanding
// reservations: how many, and the counters they hold quota on, each with
// what is used of it and, of that, what reservations hold.
type reservationUsage struct {
	Outstanding int                `json:"outstanding"`
	Counters    []heldCounterUsage `json:"counters"`
}

// heldCounterUsage is one counter with outstanding reservations (an
// identifier under a rule, or an inline limit): used counts every admitted
// hit of its current window (or what is missing from its bucket), held the
// part of it that unexpired, unsettled reservations hold — at most used: a
// bucket's refill gives tokens back, held or not.
type heldCounterUsage struct {
	Identifier   string  `json:"identifier"`
	Rule         string  `json:"rule,omitempty"`
	Algorithm    string  `json:"algorithm"`
	Limit        int64   `json:"limit"`
	Window       int64   `json:"window,omitempty"`
	RefillRate   float64 `json:"refill_rate,omitempty"`
	Used         int64   `json:"used"`
	Held         int64   `json:"held"`
	Remaining    int64   `json:"remaining"`
	ResetAt      int64   `json:"reset_at"`
	Reservations int     `json:"reservations"`
}

// readReservationUsage lists c's outstanding reservations by counter (the
// most reserved first, at most maxHeldCounters) with each counter's used,
// held and remaining quota; nil when the ledger or the limiter cannot be
// read (the rest of the usage does not need them).
func readReservationUsage(ctx context.Context, limiter algorithms.Store, out *outstanding, c store.Client) *reservationUsage {
	ids, err := out.ledger.List(ctx, c.ID)
	if err != nil {
		return nil
	}
	type counter struct {
		req algorithms.Request
		n   int
	}
	byKey := map[string]*counter{}
	for _, id := range ids {
		tok, ok := decodeReservationID(c, id)
		if !ok {
			continue
		}
		st, ok := tok.settleOf()
		if !ok {
			continue
		}
		k := tok.Identifier + "\x00" + tok.Counter + "\x00" + algorithms.StateName(&st.Request)
		if byKey[k] == nil {
			byKey[k] = &counter{req: st.Request}
		}
		byKey[k].n++
	}
	counters := make([]*counter, 0, len(byKey))
	for _, ct := range byKey {
		counters = append(counters, ct)
	}
	slices.SortFunc(counters, func(a, b *counter) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.req.Key.Identifier, b.req.Key.Identifier),
			cmp.Compare(a.req.Key.Name, b.req.Key.Name), cmp.Compare(algorithms.StateName(&a.req), algorithms.StateName(&b.req)))
	})
	counters = counters[:min(len(counters), maxHeldCounters)]
	rs := &reservationUsage{Outstanding: len(ids), Counters: make([]heldCounterUsage, 0, len(counters))}
	if len(counters) == 0 {
		return rs
	}
	reqs := make([]algorithms.Request, len(counters))
	for i, ct := range counters {
		reqs[i] = ct.req // Hits 0: a read
	}
	ds, err := limiter.Check(ctx, reqs)
	if err != nil {
		return nil
	}
	held, err := limiter.Held(ctx, reqs)
	if err != nil {
		return nil
	}
	for i, ct := range counters {
		l, d := ct.req.Limit, ds[i]
		used := max(0, l.Limit-d.Remaining)
		rs.Counters = append(rs.Counters, heldCounterUsage{
			Identifier: ct.req.Key.Identifier, Rule: strings.TrimPrefix(ct.req.Key.Name, "rule:"), Algorithm: string(l.Algorithm),
			Limit: l.Limit, Window: int64(l.Window / time.Second), RefillRate: l.RefillRate,
			Used: used, Held: min(held[i], used), Remaining: d.Remaining, ResetAt: ceilUnix(d.ResetAt()),
			Reservations: ct.n,
		})
	}
	return rs
}
