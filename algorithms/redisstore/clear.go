package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

// Clear deletes the state of each request's key and limit — what Check of
// the request reads and writes, indexed or not — and returns how many
// existed. On a Cluster, each master's requests in one call.
func (s *Store) Clear(ctx context.Context, reqs []algorithms.Request) (int, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return 0, err
	}
	if len(reqs) == 0 {
		return 0, nil
	}
	held := false
	for i := range reqs {
		held = s.approx.forgetRequest(&reqs[i]) || held
	}
	if held {
		s.syncer.awaitSends()
	}
	s.route.ready(ctx)
	total := 0
	for _, p := range s.route.split(reqs, nil) {
		var n int
		err := s.route.onKey(ctx, s.indexKey(p.reqs[0].Key.Scope, p.reqs[0].Key.Identifier), func(sh *master) error {
			var err error
			n, err = s.clearOn(ctx, sh.client, p.reqs)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("redis: clear: %w", err)
		}
		total += n
	}
	return total, nil
}

// clearOn runs clear.lua for reqs on one master.
func (s *Store) clearOn(ctx context.Context, c redis.Cmdable, reqs []algorithms.Request) (int, error) {
	keys := make([]string, len(reqs))
	blob := make([]byte, 0, 9*len(reqs))
	args := make([]any, 3, 3+len(reqs))
	for i := range reqs {
		r := &reqs[i]
		keys[i] = s.stateKey(r)
		blob = append(blob, algNumber(r.Limit.Algorithm))
		blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(r.Limit.Window.Microseconds())))
		args = append(args, s.holdIndex(keys[i]))
	}
	args[0], args[1], args[2] = s.nowArg(), blob, ""
	keys, args = s.route.pack(keys, args, 2)
	return s.clear.Run(ctx, c, keys, args...).Int()
}

// refundVoided takes back, on a Cluster, what the masters counted for an
// all-or-nothing batch that another master's request was over: each master
// decided its own part atomically, but only the whole batch says whether
// the group is void (algorithms.VoidedCounts). Between the counting and the
// refund (one more round trip) another request can see the count that is
// then taken back.
func (s *Store) refundVoided(ctx context.Context, reqs []algorithms.Request, ds []algorithms.Decision) {
	if at := algorithms.VoidedCounts(reqs, ds); len(at) > 0 {
		s.refundAt(ctx, reqs, at, ds)
	}
}

// refundAt takes back the hits counted for the requests of reqs at
// positions at, decided as ds: each on its master, at the time of its
// decision (so from the window that counted it); an approximate one from
// the table that counted it. A refund that fails leaves the hits counted:
// over-counting, never under. The decisions of the refunded requests say so
// (Counted false, Remaining up by their hits).
func (s *Store) refundAt(ctx context.Context, reqs []algorithms.Request, at []int, ds []algorithms.Decision) {
	refunded := func(i int) {
		ds[i].Counted = false
		ds[i].Remaining = min(ds[i].Limit, ds[i].Remaining+reqs[i].Hits)
		ds[i].HoldExpires = time.Time{}
	}
	var exact, held []int
	for _, i := range at {
		switch {
		case approximate(&reqs[i]) && s.approx.undo(&reqs[i], ds[i].Now):
			refunded(i)
		case reqs[i].Hold != nil && ds[i].Allowed:
			held = append(held, i) // kept a hold: take it back with its hits
		default:
			exact = append(exact, i) // Redis decided it (the table was full: overflow)
		}
	}
	for _, i := range s.voidHolds(ctx, reqs, held) {
		refunded(i)
	}
	if len(exact) == 0 {
		return
	}
	for _, p := range s.route.split(reqs, exact) {
		// The requests of one master's call share its time; a part sent
		// again after a redirect may not: one refund per time.
		for len(p.at) > 0 {
			now := ds[p.at[0]].Now
			var same, rest []int
			for _, i := range p.at {
				if ds[i].Now.Equal(now) {
					same = append(same, i)
				} else {
					rest = append(rest, i)
				}
			}
			if s.refundOn(ctx, p.sh, reqs, same, now) == nil {
				for _, i := range same {
					refunded(i)
				}
			}
			p.at = rest
		}
	}
}

// refundOn runs refund.lua on one master for the requests at positions at,
// decided at now.
func (s *Store) refundOn(ctx context.Context, sh *master, reqs []algorithms.Request, at []int, now time.Time) error {
	if sh.client == nil {
		return errNoMaster
	}
	blob := make([]byte, 0, 25*len(at))
	keys := make([]string, 0, len(at))
	for _, i := range at {
		r := &reqs[i]
		third := float64(r.Limit.Window.Microseconds())
		if r.Limit.Algorithm == algorithms.TokenBucket {
			third = r.Limit.Refill()
		}
		blob = append(blob, algNumber(r.Limit.Algorithm))
		for _, f := range []float64{float64(r.Limit.Limit), third, float64(r.Hits)} {
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(f))
		}
		keys = append(keys, s.stateKey(r))
	}
	keys, args := s.route.pack(keys, []any{strconv.FormatInt(now.UnixMicro(), 10), blob, ""}, 2)
	err := s.refund.Run(ctx, sh.client, keys, args...).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis: refund: %w", err)
	}
	return nil
}

// Clear clears on Redis (and on the local fallback in FailLocal). It fails
// when Redis cannot be reached: a clear that did not happen must not look
// like one that did.
func (g *Guard) Clear(ctx context.Context, reqs []algorithms.Request) (int, error) {
	if g.opts.Local != nil {
		if _, err := g.opts.Local.Clear(ctx, reqs); err != nil {
			return 0, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, max(g.opts.Timeout, time.Second))
	defer cancel()
	return g.store.Clear(cctx, reqs)
}

// Settle settles on Redis; in FailLocal, a hold Redis does not know is
// looked for in the local fallback (made while Redis was failing). It
// fails when Redis cannot be reached: a settle must not look done when it
// was not.
func (g *Guard) Settle(ctx context.Context, sts []algorithms.Settle) ([]algorithms.SettleResult, error) {
	cctx, cancel := context.WithTimeout(ctx, max(g.opts.Timeout, time.Second))
	defer cancel()
	out, err := g.store.Settle(cctx, sts)
	if err != nil || g.opts.Local == nil {
		return out, err
	}
	var at []int
	for i := range out {
		if out[i].Outcome == algorithms.UnknownHold {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return out, nil
	}
	sub := make([]algorithms.Settle, len(at))
	for j, i := range at {
		sub[j] = sts[i]
	}
	local, err := g.opts.Local.Settle(ctx, sub)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = local[j]
	}
	return out, nil
}
