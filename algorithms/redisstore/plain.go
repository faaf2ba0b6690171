package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

// The count-first regime (algorithms.CountThenRefund): window counters
// without Lua. A fixed or sliding window's state is a plain
// counter per window, so a decision needs no script: one command, pipelined
// with every other request of the batch — SET NX with the TTL of the window
// (its end; for a sliding window the next one's, whose previous window it
// is then) makes a new counter, INCRBY adds to one the store knows — and,
// for a sliding window, a GET of the previous window's counter beside it.
// A script call costs Redis about three times the instructions per
// decision of SET NX, six times those of INCRBY (docs/algorithms.md), and
// Redis does not scale with Throttle's replicas.
//
// What the script decides atomically, the pipeline decides by counting
// first and taking back after: hits over the limit (unless AlwaysCount),
// and every request of an all-or-nothing group one of whose requests is
// over, are refunded (refund.lua) before Check returns. No request is ever
// admitted past its limit — each admission saw a count that held every hit
// counted before it — but for the length of that second round trip another
// request can see hits that are then taken back, and be refused although
// it would fit (never with hits of 1 and no group: a count of 1-hit
// requests passes the limit only when the limit is used up).
//
// The windows follow Redis's clock, as the script's do: each batch asks
// Redis TIME along, and the store keeps its offset from the local clock
// (redisClock), so replicas on skewed hosts agree on where a window starts.
//
// Only fixed and sliding windows that are CountThenRefund and Unindexed go
// this way (the Envoy service's counters, which nothing resets by
// identifier: the pipeline keeps no index); a caller's
// requests go together, all this way or all by the script. A sliding
// window's previous counter is final once its window is over on Redis's
// clock, as the script reads it; a replica whose estimate of that clock is
// behind by less than its round trip can still add to it just after
// (redisClock), as it can to a fixed window's.

// expiryMargin is how long a window's counter outlives its window, at most:
// the uncertainty of the clock's offset from Redis's (redisClock) must never
// let a counter expire while a replica still counts in its window.
const expiryMargin = 100 * time.Millisecond

// plainEligible reports whether r is counted first and refunded after
// (algorithms.CountThenRefund): a fixed or sliding window, unindexed, not a
// refund (negative hits go by the script), keeping no hold (a hold is
// written in the script call that counts it).
func plainEligible(r *algorithms.Request) bool {
	return r.Counting == algorithms.CountThenRefund && r.Unindexed && r.Hits >= 0 && r.Hold == nil &&
		(r.Limit.Algorithm == algorithms.FixedWindow || r.Limit.Algorithm == algorithms.SlidingWindow)
}

// splitPlain returns the positions of the callers' requests (sizes: each
// caller's count, nil for one caller) that go without the script, and of
// those that go by it; nil for none.
func splitPlain(reqs []algorithms.Request, sizes []int) (plain, scripted []int) {
	algorithms.Groups(len(reqs), sizes, func(_, from, to int) {
		all := true
		for i := from; i < to && all; i++ {
			all = plainEligible(&reqs[i])
		}
		for i := from; i < to; i++ {
			if all {
				plain = append(plain, i)
			} else {
				scripted = append(scripted, i)
			}
		}
	})
	return plain, scripted
}

// subBatch is the requests of reqs at positions at, and the sizes of their
// callers (whole callers: splitPlain never splits one).
func subBatch(reqs []algorithms.Request, sizes []int, at []int) ([]algorithms.Request, []int) {
	sub := make([]algorithms.Request, len(at))
	for j, i := range at {
		sub[j] = reqs[i]
	}
	if sizes == nil {
		return sub, nil
	}
	var subSizes []int
	j := 0
	algorithms.Groups(len(reqs), sizes, func(_, from, to int) {
		if j < len(at) && at[j] == from {
			subSizes = append(subSizes, to-from)
			j += to - from
		}
	})
	return sub, subSizes
}

// plainOp is what the pipelines send for one request.
type plainOp struct {
	key   string
	hash  uint64           // of key, for knownCounters
	known bool             // knownCounters holds it
	ttl   time.Duration    // the counter's TTL when it is made
	set   *redis.BoolCmd   // SET NX: true when it made the counter (the count is the hits)
	incr  *redis.IntCmd    // INCRBY: the count after
	get   *redis.StringCmd // a read: nothing counted
	prev  *redis.StringCmd // a sliding window's previous counter
}

// counted reports whether the request's hits were counted.
func (op *plainOp) counted() bool {
	return (op.set != nil && op.set.Err() == nil && op.set.Val()) || (op.incr != nil && op.incr.Err() == nil)
}

// execPipe runs a pipeline and returns the first error that is not a
// counter's absence.
func execPipe(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if len(cmds) == 0 {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return e
		}
	}
	return nil
}

// decidePlain decides a batch of plain-eligible requests on master sh,
// then refunds what must not stay counted. One pipeline, one command a
// decision (and a GET of its previous counter for a sliding window): INCRBY
// for a counter known to exist (this store made or saw it in this window:
// knownCounters), SET NX with its TTL for one it does not.
// A second pipeline only when the first found that a SET NX counter
// existed already (another replica made it: INCRBY now), or that a known
// one did not (deleted: cleared, refunded to zero, evicted; INCRBY made it
// anew, PEXPIRE gives it its TTL).
func (s *Store) decidePlain(ctx context.Context, sh *master, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
	nowUS, err := s.plainNow(ctx, sh)
	if err != nil {
		return nil, err
	}
	ops := s.plainOps(reqs, nowUS)
	sh.known.lookup(ops)
	err = s.count(ctx, sh, reqs, ops, nowUS)
	if err == nil {
		err = s.countAgain(ctx, sh, reqs, ops)
	}
	if err != nil {
		// Some commands may have run: take back what they counted.
		s.refundPlain(ctx, sh, reqs, ops, nowUS, func(int) bool { return true })
		return nil, fmt.Errorf("redis: %w", err)
	}
	sh.answered.Store(time.Now().UnixNano())
	sh.known.add(ops)
	fs, err := plainFound(reqs, ops, nowUS)
	if err != nil {
		return nil, err
	}
	// Refund what Redis counted and the decision does not: the hits of a
	// request over its limit, those of a void all-or-nothing group.
	ds, err := algorithms.DecideFound(reqs, sizes, fs, nowUS)
	if !s.refundPlain(ctx, sh, reqs, ops, nowUS, func(i int) bool { return !ds[i].Counted }) {
		// The hits stay counted: over-counting, never under. Say so where
		// the request was within its limit (its group was void).
		for i := range ds {
			if ops[i].counted() && fs[i].Within && !ds[i].Counted && !reqs[i].AlwaysCount {
				ds[i].Counted = true
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return ds, nil
}

// plainOps returns each request's counter key at nowUS and the TTL it is
// made with (plus a random part of Options.ExpirationJitter).
func (s *Store) plainOps(reqs []algorithms.Request, nowUS int64) []plainOp {
	ops := make([]plainOp, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		left := r.Limit.Window.Microseconds() - nowUS%r.Limit.Window.Microseconds() // until the window ends
		ops[i].key = s.windowKey(r, nowUS)
		ops[i].ttl = time.Duration(left)*time.Microsecond + min(expiryMargin, r.Limit.Window)
		if r.Limit.Algorithm == algorithms.SlidingWindow {
			ops[i].ttl += r.Limit.Window // it is the next window's previous one
		}
		if j := s.opts.ExpirationJitter; j > 0 {
			ops[i].ttl += rand.N(j)
		}
	}
	return ops
}

// count sends the first pipeline: each request's command, a sliding
// window's GET of its previous counter, and Redis TIME for the master's
// clock.
func (s *Store) count(ctx context.Context, sh *master, reqs []algorithms.Request, ops []plainOp, nowUS int64) error {
	pipe := sh.client.Pipeline()
	var clock *redis.TimeCmd
	if s.now == nil {
		clock = pipe.Time(ctx)
	}
	for i := range reqs {
		r, op := &reqs[i], &ops[i]
		if r.Limit.Algorithm == algorithms.SlidingWindow {
			op.prev = pipe.Get(ctx, s.windowKey(r, nowUS-r.Limit.Window.Microseconds()))
		}
		switch {
		case r.Hits == 0 || (r.Hits > r.Limit.Limit && !r.AlwaysCount):
			// A read: a peek, or hits that cannot be within the limit.
			op.get = pipe.Get(ctx, op.key)
		case op.known:
			op.incr = pipe.IncrBy(ctx, op.key, r.Hits)
		default:
			op.set = pipe.SetNX(ctx, op.key, r.Hits, op.ttl)
		}
	}
	sent := time.Now()
	err := execPipe(ctx, pipe)
	if err == nil && clock != nil {
		sh.clock.sample(sent, time.Now(), clock.Val())
	}
	return err
}

// countAgain sends the second pipeline, when the first needs one: INCRBY
// where SET NX found the counter made by another replica, PEXPIRE where
// INCRBY may have made it.
func (s *Store) countAgain(ctx context.Context, sh *master, reqs []algorithms.Request, ops []plainOp) error {
	var again redis.Pipeliner
	for i := range reqs {
		op := &ops[i]
		made := op.incr != nil && op.incr.Err() == nil && op.incr.Val() == reqs[i].Hits
		existed := op.set != nil && op.set.Err() == nil && !op.set.Val()
		if !(made || existed) {
			continue
		}
		if again == nil {
			again = sh.client.Pipeline()
		}
		if existed {
			op.set, op.incr = nil, again.IncrBy(ctx, op.key, reqs[i].Hits)
		}
		// A counter the INCRBY may have made: it must expire. (PEXPIRE
		// on one that has its TTL sets the same expiry.)
		again.PExpire(ctx, op.key, op.ttl)
	}
	if again == nil {
		return nil
	}
	return execPipe(ctx, again)
}

// plainFound is what the pipelines found of each request: its window's
// count before its hits (and a sliding window's previous count), and
// whether they were within the limit.
func plainFound(reqs []algorithms.Request, ops []plainOp, nowUS int64) ([]algorithms.Found, error) {
	fs := make([]algorithms.Found, len(reqs))
	for i := range reqs {
		r, op := &reqs[i], &ops[i]
		var err error
		if fs[i].Count, err = op.before(r); err != nil {
			return nil, fmt.Errorf("redis: counter %q: %w", op.key, err)
		}
		if op.prev != nil {
			if fs[i].Prev, err = readCount(op.prev); err != nil {
				return nil, fmt.Errorf("redis: counter of the previous window of %q: %w", op.key, err)
			}
		}
		fs[i].Within = algorithms.Within(r, &fs[i], nowUS)
	}
	return fs, nil
}

// before is the count of op's window before the request's hits.
func (op *plainOp) before(r *algorithms.Request) (int64, error) {
	switch {
	case op.set != nil: // made: nothing before
		return 0, nil
	case op.incr != nil:
		return op.incr.Val() - r.Hits, nil
	}
	return readCount(op.get)
}

// readCount reads a counter GET returned: 0 when there is none.
func readCount(get *redis.StringCmd) (int64, error) {
	v, err := get.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	return v, nil
}

// refundPlain takes back the hits the ops counted for the requests that
// refund selects (an AlwaysCount request keeps them) and reports whether it
// did.
func (s *Store) refundPlain(ctx context.Context, sh *master, reqs []algorithms.Request, ops []plainOp, nowUS int64, refund func(int) bool) bool {
	var at []int
	for i := range reqs {
		if ops[i].counted() && !reqs[i].AlwaysCount && refund(i) {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return true
	}
	return s.refundOn(ctx, sh, reqs, at, time.UnixMicro(nowUS)) == nil
}
