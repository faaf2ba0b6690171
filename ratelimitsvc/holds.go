package ratelimitsvc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/throttle-rl/throttle/algorithms"
)

// Reservations from Envoy's two calls, with no change to Envoy.
//
// A descriptor whose limits reserve (descriptors.Reserve) and that carries
// the handle entry they name (Match.Handle: an x-request-id) is one call of
// a pair. Envoy AI Gateway's request path checks with a hits_addend of 0,
// its response path (apply_on_stream_done) charges the tokens used with a
// hits_addend of N, both with the same descriptor. Throttle first settles
// the handle's hold in one Settle call for every such limit of the request,
// then decides everything else in the usual Check call:
//
//   - hits_addend 0, no hold of that handle: reserve. The limit is checked
//     with hits = reserve.hits and a hold (ID the handle, TTL reserve.ttl);
//     refused, it is OVER_LIMIT as any check is, and holds nothing.
//   - hits_addend 0, a hold of that handle there: commit 0 (the response of
//     a request that used nothing). The whole hold is given back.
//   - hits_addend 0, a handle settled or expired before: a reused handle.
//     Read as a reservation would be checked (over when reserve.hits do
//     not fit), holding nothing.
//   - hits_addend N > 0, a hold there: commit N, in its place (more or less
//     than it held).
//   - hits_addend N > 0, no hold there (unknown, expired, settled before):
//     N is counted as always_count counts, as the apply_on_stream_done call
//     always did: a reported cost is never lost.
//
// A limit that reserves counts the held hits at once, so limit_remaining
// and the rate-limit headers of the request path show them gone. When the
// backend cannot settle (Redis down), the calls are decided as if no hold
// existed, by the failure policy (FAILURE_MODE) like every other check.

// holdMode is what a limit's handle makes of a call.
type holdMode uint8

const (
	noHold      holdMode = iota
	holdReserve          // hold reserve.hits under the handle
	holdRecheck          // a reused handle: read, over when reserve.hits do not fit
	holdSettled          // settled; decided by the settlement
	holdAlways           // a commit with no hold to commit to: count it always
	holdCleared          // a commit of a hold its counter's reset took: count nothing, read
)

// settleHolds settles the handle of every limit of todo that reserves, and
// sets each one's holdMode (those it settled decided). The error is the
// engine's refusal of the request, or the caller gone; a backend failure
// is not one: the limits are then decided as if no hold existed.
func (s *Server) settleHolds(ctx context.Context, todo []*limited) error {
	var (
		settles []algorithms.Settle
		at      []*limitState
	)
	for _, l := range todo {
		for i := range l.limits {
			ls := &l.limits[i]
			ls.hold = noHold
			if l.handle == "" || ls.limit.Reserve == nil || ls.engine.Algorithm == "" {
				continue
			}
			settles = append(settles, algorithms.Settle{ID: l.handle,
				Request: algorithms.Request{Key: l.key, Limit: ls.engine, Hits: l.hits, Unindexed: true}})
			at = append(at, ls)
		}
	}
	if len(settles) == 0 {
		return nil
	}
	results, err := s.opts.Limiter.Settle(ctx, settles)
	if err != nil {
		if errors.Is(err, algorithms.ErrInvalid) || ctx.Err() != nil {
			return err
		}
		s.opts.Log.WarnContext(ctx, "reservations not settled: deciding as if none were held", "err", err)
		results = nil
	}
	for k, ls := range at {
		found := algorithms.UnknownHold
		if results != nil {
			found = results[k].Outcome
		}
		ls.hold = holdModeOf(settles[k].Request.Hits == 0, found)
		if ls.hold == holdSettled {
			d := results[k].Decision
			ls.remaining, ls.reset, ls.retry, ls.degraded = d.Remaining, d.ResetAfter, 0, d.Degraded
			// A commit of 0 on the request path is a reused handle: it
			// passes only where a reservation would have.
			ls.over = settles[k].Request.Hits == 0 && d.Remaining < ls.limit.Reserve.Hits
		}
		s.metrics.reservation(ls.hold)
	}
	return nil
}

// holdModeOf is what a call of hits_addend 0 (reserve) or N finds its
// handle's hold to be.
func holdModeOf(reserve bool, found algorithms.SettleOutcome) holdMode {
	switch {
	case found == algorithms.Settled:
		return holdSettled
	case !reserve && found == algorithms.Cleared:
		return holdCleared
	case reserve && found == algorithms.UnknownHold:
		return holdReserve
	case reserve:
		return holdRecheck
	}
	return holdAlways
}

// holdRequest sets r, the engine request of limit ls of l, as ls's
// holdMode asks, and returns the hits a read of 0 stands for.
func holdRequest(r *algorithms.Request, l *limited, ls *limitState) (peek int64) {
	switch ls.hold {
	case holdReserve:
		r.Hits = ls.limit.Reserve.Hits
		r.Hold = &algorithms.Hold{ID: l.handle, TTL: ls.limit.Reserve.TTL}
		r.Counting, r.AlwaysCount = algorithms.Atomic, false
	case holdRecheck:
		r.Hits = 0
		return ls.limit.Reserve.Hits
	case holdCleared:
		r.Hits = 0 // the reset forgot the hold and its hits: nothing counts into the fresh counter
	case holdAlways:
		r.AlwaysCount = true
	}
	return 0
}

// maxHandleLen is the longest handle value used as a hold's ID as it is;
// a longer one (a client's own x-request-id, say) is used by its SHA-256,
// so it still names one request and never exceeds the engine's bound on
// IDs.
const maxHandleLen = 128

// holdID is the hold ID of a handle value.
func holdID(handle string) string {
	if len(handle) <= maxHandleLen {
		return handle
	}
	sum := sha256.Sum256([]byte(handle))
	return "sha256:" + hex.EncodeToString(sum[:])
}
