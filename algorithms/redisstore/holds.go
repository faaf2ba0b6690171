package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Holds (algorithms.Hold, reservations) in Redis. A request with a Hold
// goes by the script (never counted first, never from the approximate
// table): batch.lua counts its hits as any others and, in the same call,
// writes the hold beside the counter (hold.lua): a key "<state>:h:<id>"
// in the counter's slot that says what it holds, where it was counted and
// until when, listed in its master's index of holds (a sorted set by
// expiry). Settle is one call per master (hold.lua's settle). Every
// replica's sweeper calls each master every HoldSweepEvery (hold.lua's
// sweep) and gives back the holds of its index that expired, whoever made
// them: a hold nobody settles is given back within its TTL and a sweep
// interval, also when the replica that made it is gone.
//
// The index of a master: on a single Redis (or Sentinel's master) one key;
// on a Cluster one key per run of consecutive slots the master serves,
// named with a hash tag of the run's first slot, so it lives on that
// master and moves with the run (a failover hands the replica the same
// slots, and the same indexes). A hold is listed in the index of its
// counter's run as the slot table says when it is made; the sweeper reads
// the indexes of every master that answers, each on its own, so a master
// that is down holds back only its own holds (they expire once it is back,
// or its replica took over). Should a resharding split a run, a hold
// listed in an index whose slot went elsewhere is dropped from the index
// by the sweep that finds it (it then expires only with its counter's
// window or bucket).

// DefaultHoldSweepEvery is how often a store sweeps expired holds.
const DefaultHoldSweepEvery = 250 * time.Millisecond

// holdSweepBatch bounds the holds one sweep gives back per index.
const holdSweepBatch = 512

// flagHold marks a packed request that keeps a hold (batch.lua).
const flagHold = 8

// holdKey is the key of the hold id of r's state.
func (s *Store) holdKey(r *algorithms.Request, id string) string {
	var buf [192]byte
	b := append(s.appendStateKey(buf[:0], r), ":h:"...)
	return string(algorithms.AppendKeyPart(b, id))
}

// slotTags is, for each Cluster slot, a short hash tag in that slot.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, clusterSlots)
	left := clusterSlots
	for n := int64(0); left > 0; n++ {
		t := strconv.FormatInt(n, 36)
		if slot := crc16(t) % clusterSlots; tags[slot] == "" {
			tags[slot] = t
			left--
		}
	}
	return tags
})

// holdIndexOfSlot is the key of the index of holds named for slot.
func (s *Store) holdIndexOfSlot(slot int) string {
	return s.opts.KeyPrefix + keyPrefix + "{" + slotTags()[slot] + "}:holds"
}

// holdIndex is the index of holds that lists a hold of the counter key.
func (s *Store) holdIndex(key string) string {
	if t := s.route.topo.Load(); t.one == nil && t.first != nil {
		return s.holdIndexOfSlot(int(t.first[keySlot(key)]))
	}
	return s.holdIndexOfSlot(0)
}

// holdIndexesOf are the indexes of holds of master sh.
func (s *Store) holdIndexesOf(sh *master) []string {
	t := s.route.topo.Load()
	if t.one != nil || t.first == nil {
		return []string{s.holdIndexOfSlot(0)}
	}
	var out []string
	for i, at := range t.slots {
		if at == sh && int(t.first[i]) == i {
			out = append(out, s.holdIndexOfSlot(i))
		}
	}
	return out
}

// holdArgs appends to args the arguments batch.lua reads of r's hold after
// r's member: the hold's key, TTL in µs, keep in ms, and index.
func (s *Store) holdArgs(args []any, r *algorithms.Request, key string) []any {
	h := r.Hold
	return append(args, s.holdKey(r, h.ID), strconv.FormatInt(h.TTL.Microseconds(), 10),
		strconv.FormatInt(algorithms.HoldKeep(r.Limit, h.TTL).Milliseconds(), 10), s.holdIndex(key))
}

// setHoldExpires sets the HoldExpires of the decisions whose requests kept
// a hold (batch.lua keeps one where the hits were within the limit and
// stayed counted).
func setHoldExpires(reqs []algorithms.Request, ds []algorithms.Decision) {
	for i := range reqs {
		if h := reqs[i].Hold; h != nil && ds[i].Counted && ds[i].Allowed {
			ds[i].HoldExpires = ds[i].Now.Add(h.TTL)
		}
	}
}

// Settle settles each hold on its master: one call per master.
func (s *Store) Settle(ctx context.Context, sts []algorithms.Settle) ([]algorithms.SettleResult, error) {
	if err := algorithms.ValidateSettles(sts); err != nil {
		return nil, err
	}
	out := make([]algorithms.SettleResult, len(sts))
	if len(sts) == 0 {
		return out, nil
	}
	reqs := make([]algorithms.Request, len(sts))
	for i := range sts {
		reqs[i] = sts[i].Request
	}
	s.route.ready(ctx)
	for _, p := range s.route.split(reqs, nil) {
		sub := make([]algorithms.Settle, len(p.at))
		for j, i := range p.at {
			sub[j] = sts[i]
		}
		var rs []algorithms.SettleResult
		err := s.route.onKey(ctx, s.indexKey(p.reqs[0].Key.Scope, p.reqs[0].Key.Identifier), func(sh *master) error {
			var err error
			rs, err = s.settleOn(ctx, sh, sub, false)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("redis: settle: %w", err)
		}
		for j, i := range p.at {
			out[i] = rs[j]
		}
	}
	return out, nil
}

// settleOn runs hold.lua's settle for sts on master sh; void: the holds
// are cancelled and leave no record (voidHolds).
func (s *Store) settleOn(ctx context.Context, sh *master, sts []algorithms.Settle, void bool) ([]algorithms.SettleResult, error) {
	keys := make([]string, 0, 3*len(sts))
	blob := make([]byte, 0, 26*len(sts))
	for i := range sts {
		st := &sts[i]
		r := &st.Request
		state := s.stateKey(r)
		keys = append(keys, state, s.holdKey(r, st.ID), s.holdIndex(state))
		var flags byte
		if st.Cancel {
			flags = 1
		}
		if void {
			flags = 3
		}
		blob = append(blob, algNumber(r.Limit.Algorithm), flags)
		for _, f := range []float64{float64(r.Limit.Limit), thirdOf(r), float64(r.Hits)} {
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(f))
		}
	}
	keys, args := s.route.pack(keys, []any{s.nowArg(), blob, ""}, 2)
	res, err := s.runFn(ctx, sh, s.settleFn, keys, args).Slice()
	if err != nil {
		return nil, err
	}
	sh.answered.Store(time.Now().UnixNano())
	return decodeSettles(res, sts)
}

// thirdOf is the third number of a packed request: a token bucket's
// refill rate, else its window in µs.
func thirdOf(r *algorithms.Request) float64 {
	if r.Limit.Algorithm == algorithms.TokenBucket {
		return r.Limit.Refill()
	}
	return float64(r.Limit.Window.Microseconds())
}

// decodeSettles turns settle's reply into results.
func decodeSettles(res []any, sts []algorithms.Settle) ([]algorithms.SettleResult, error) {
	r := replyReader{res: res}
	nowUS := r.int()
	out := make([]algorithms.SettleResult, len(sts))
	for i := range sts {
		o := algorithms.SettleOutcome(r.int())
		out[i].Outcome = o
		if o != algorithms.Settled || r.err != nil {
			continue
		}
		out[i].Held = r.int()
		peek := sts[i].Request
		peek.Hits = 0
		f := r.found(&peek)
		algorithms.Decide(&peek, &f, nowUS, &out[i].Decision)
	}
	if r.err == nil && r.at != len(res) {
		r.err = fmt.Errorf("%d values in the reply, %d read", len(res), r.at)
	}
	if r.err != nil {
		return nil, fmt.Errorf("settle reply: %w", r.err)
	}
	return out, nil
}

// voidHolds takes back the holds of the requests of reqs at positions at,
// counted for an all-or-nothing group another master voided: their hits
// given back, the holds gone (refundAt). It returns the positions it took
// back.
func (s *Store) voidHolds(ctx context.Context, reqs []algorithms.Request, at []int) []int {
	if len(at) == 0 {
		return nil // (split reads nil as every position)
	}
	var done []int
	for _, p := range s.route.split(reqs, at) {
		sts := make([]algorithms.Settle, len(p.reqs))
		for j := range p.reqs {
			sts[j] = algorithms.Settle{Request: p.reqs[j], ID: p.reqs[j].Hold.ID, Cancel: true}
			sts[j].Request.Hold = nil
		}
		if p.sh.client == nil {
			continue
		}
		if _, err := s.settleOn(ctx, p.sh, sts, true); err == nil {
			done = append(done, p.at...)
		}
	}
	return done
}

// Held sums, for each request, the hits of its counter's unexpired held
// holds (hold.lua's held, from the state's list of holds): one call per
// master. A hold past its expiry is left out even before a sweep gave it
// back.
func (s *Store) Held(ctx context.Context, reqs []algorithms.Request) ([]int64, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	out := make([]int64, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	s.route.ready(ctx)
	for _, p := range s.route.split(reqs, nil) {
		keys := make([]string, len(p.reqs))
		blob := make([]byte, 0, 9*len(p.reqs))
		for j := range p.reqs {
			r := &p.reqs[j]
			keys[j] = s.stateKey(r)
			blob = append(blob, algNumber(r.Limit.Algorithm))
			blob = binary.LittleEndian.AppendUint64(blob, math.Float64bits(float64(r.Limit.Window.Microseconds())))
		}
		keys, args := s.route.pack(keys, []any{s.nowArg(), blob, ""}, 2)
		var sums []int64
		err := s.route.onKey(ctx, s.indexKey(p.reqs[0].Key.Scope, p.reqs[0].Key.Identifier), func(sh *master) error {
			var err error
			sums, err = s.runFn(ctx, sh, s.heldFn, keys, args).Int64Slice()
			return err
		})
		if err == nil && len(sums) != len(p.at) {
			err = fmt.Errorf("%d sums for %d counters", len(sums), len(p.at))
		}
		if err != nil {
			return nil, fmt.Errorf("redis: held: %w", err)
		}
		for j, i := range p.at {
			out[i] = sums[j]
		}
	}
	return out, nil
}

// Held reads on Redis within the Guard's timeout (at least a second). It
// fails when Redis cannot be reached: nothing decides by policy here.
func (g *Guard) Held(ctx context.Context, reqs []algorithms.Request) ([]int64, error) {
	cctx, cancel := context.WithTimeout(ctx, max(g.opts.Timeout, time.Second))
	defer cancel()
	return g.store.Held(cctx, reqs)
}

// Held reads each request's held hits on its side.
func (s *Split) Held(ctx context.Context, reqs []algorithms.Request) ([]int64, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	at, _ := s.bySide(len(reqs), func(i int) *algorithms.Request { return &reqs[i] })
	out := make([]int64, len(reqs))
	for k, g := range s.sides {
		if len(at[k]) == 0 {
			continue
		}
		sums, err := g.Held(ctx, subset(reqs, at[k]))
		if err != nil {
			return nil, sideErr(k, err)
		}
		for j, i := range at[k] {
			out[i] = sums[j]
		}
	}
	return out, nil
}
