package algorithms

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Window counters without Lua. A fixed or sliding window's state is a plain
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
// Only unindexed fixed and sliding windows go this way (the Envoy
// service's counters, which nothing resets by identifier); a caller's
// requests go together, all this way or all by the script. A sliding
// window's previous counter is final once its window is over on Redis's
// clock, as the script reads it; a replica whose estimate of that clock is
// behind by less than its round trip can still add to it just after
// (redisClock), as it can to a fixed window's.

// expiryMargin is how long a window's counter outlives its window, at most:
// the uncertainty of the clock's offset from Redis's (redisClock) must never
// let a counter expire while a replica still counts in its window.
const expiryMargin = 100 * time.Millisecond

// plainEligible reports whether r can be decided without the script.
func plainEligible(r *Request) bool {
	return (r.Limit.Algorithm == FixedWindow || r.Limit.Algorithm == SlidingWindow) && r.Unindexed && r.Hits >= 0
}

// splitPlain returns the positions of the callers' requests (sizes: each
// caller's count, nil for one caller) that go without the script, and of
// those that go by it; nil for none.
func splitPlain(reqs []Request, sizes []int) (plain, scripted []int) {
	groups(len(reqs), sizes, func(_, from, to int) {
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
func subBatch(reqs []Request, sizes []int, at []int) ([]Request, []int) {
	sub := make([]Request, len(at))
	for j, i := range at {
		sub[j] = reqs[i]
	}
	if sizes == nil {
		return sub, nil
	}
	var subSizes []int
	j := 0
	groups(len(reqs), sizes, func(_, from, to int) {
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

// decidePlain decides a batch of plain-eligible requests on sh's master,
// then refunds what must not stay counted. One pipeline, one command a
// decision (and a GET of its previous counter for a sliding window): INCRBY
// for a counter the shard knows exists (it made or saw it in this window:
// knownCounters), SET NX with its TTL for one it does not.
// A second pipeline only when the first found that a SET NX counter
// existed already (another replica made it: INCRBY now), or that a known
// one did not (deleted: cleared, refunded to zero, evicted; INCRBY made it
// anew, PEXPIRE gives it its TTL).
func (s *RedisStore) decidePlain(ctx context.Context, sh *shard, reqs []Request, sizes []int) ([]Decision, error) {
	nowUS, err := s.plainNow(ctx, sh)
	if err != nil {
		return nil, err
	}
	ops := make([]plainOp, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		left := r.Limit.Window.Microseconds() - nowUS%r.Limit.Window.Microseconds() // until the window ends
		ops[i].key = s.windowKey(r, nowUS)
		ops[i].ttl = time.Duration(left)*time.Microsecond + min(expiryMargin, r.Limit.Window)
		if r.Limit.Algorithm == SlidingWindow {
			ops[i].ttl += r.Limit.Window // it is the next window's previous one
		}
	}
	sh.known.lookup(ops)
	pipe := sh.client.Pipeline()
	var clock *redis.TimeCmd
	if s.now == nil {
		clock = pipe.Time(ctx)
	}
	for i := range reqs {
		r, op := &reqs[i], &ops[i]
		if r.Limit.Algorithm == SlidingWindow {
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
	err = execPipe(ctx, pipe)
	if err == nil && clock != nil {
		sh.clock.sample(sent, time.Now(), clock.Val())
	}
	var again redis.Pipeliner
	for i := range reqs {
		op := &ops[i]
		made := op.incr != nil && op.incr.Err() == nil && op.incr.Val() == reqs[i].Hits
		existed := op.set != nil && op.set.Err() == nil && !op.set.Val()
		if err != nil || !(made || existed) {
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
	if again != nil {
		err = execPipe(ctx, again)
	}
	if err != nil {
		// Some commands may have run: take back what they counted.
		s.refundPlain(ctx, sh, reqs, ops, nowUS, func(int) bool { return true })
		return nil, fmt.Errorf("redis: %w", err)
	}
	sh.answered.Store(time.Now().UnixNano())
	sh.known.add(ops)
	fs := make([]found, len(reqs))
	for i := range reqs {
		r, op := &reqs[i], &ops[i]
		var before int64
		switch {
		case op.set != nil: // made: nothing before
		case op.incr != nil:
			before = op.incr.Val() - r.Hits
		default:
			v, err := op.get.Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("redis: counter %q: %w", op.key, err)
			}
			before = v
		}
		w := r.Limit.Window.Microseconds()
		fs[i] = found{within: before+r.Hits <= r.Limit.Limit, window: windowState{start: nowUS - nowUS%w, count: before}}
		if op.prev != nil {
			prev, err := op.prev.Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("redis: counter of the previous window of %q: %w", op.key, err)
			}
			fs[i].window.prev = prev
			_, o := decideSliding(&fs[i].window, nowUS, w, r.Limit.Limit, r.Hits, r.AlwaysCount)
			fs[i].within = o.allowed
		}
	}
	// Refund what Redis counted and the decision does not: the hits of a
	// request over its limit, those of a void all-or-nothing group.
	ds, err := decideAll(reqs, sizes, fs, nowUS)
	if !s.refundPlain(ctx, sh, reqs, ops, nowUS, func(i int) bool { return !ds[i].Counted }) {
		// The hits stay counted: over-counting, never under. Say so where
		// the request was within its limit (its group was void).
		for i := range ds {
			if ops[i].counted() && fs[i].within && !ds[i].Counted && !reqs[i].AlwaysCount {
				ds[i].Counted = true
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// refundPlain takes back the hits the ops counted for the requests that
// refund selects (an AlwaysCount request keeps them) and reports whether it
// did.
func (s *RedisStore) refundPlain(ctx context.Context, sh *shard, reqs []Request, ops []plainOp, nowUS int64, refund func(int) bool) bool {
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

// plainNow is the time of a plain batch in µs: RedisOptions.Now in tests,
// else Redis's clock as the shard's offset from the local clock says —
// asked first (one round trip) when the shard has none yet.
func (s *RedisStore) plainNow(ctx context.Context, sh *shard) (int64, error) {
	if s.now != nil {
		return s.now().UnixMicro(), nil
	}
	if now, ok := sh.clock.now(); ok {
		return now, nil
	}
	sent := time.Now()
	t, err := sh.client.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: %w", err)
	}
	sh.clock.sample(sent, time.Now(), t)
	now, _ := sh.clock.now()
	return now, nil
}

// redisClock keeps a Redis master's clock as an offset from the local one,
// from samples of Redis TIME: each one was taken between the moment its
// call was sent and the moment its reply came, so the sample of the
// shortest round trip is the most exact. The best sample is kept, and
// replaced by any better one, or by the next one once it is a second old
// (clocks drift, and may be stepped).
type redisClock struct {
	mu       sync.Mutex
	offsetUS int64     // Redis's time minus the local time
	spreadUS int64     // the sample's round trip: its uncertainty
	at       time.Time // when it was taken; zero: no sample
}

// sample takes Redis's time t, asked between sent and got (local time).
func (c *redisClock) sample(sent, got, t time.Time) {
	if t.IsZero() {
		return
	}
	spread := got.Sub(sent).Microseconds()
	mid := sent.Add(got.Sub(sent) / 2)
	c.mu.Lock()
	if c.at.IsZero() || spread <= c.spreadUS || got.Sub(c.at) > time.Second {
		c.offsetUS, c.spreadUS, c.at = t.UnixMicro()-mid.UnixMicro(), spread, got
	}
	c.mu.Unlock()
}

// now returns Redis's time now in µs, false without a sample.
func (c *redisClock) now() (int64, bool) {
	c.mu.Lock()
	off, ok := c.offsetUS, !c.at.IsZero()
	c.mu.Unlock()
	return time.Now().UnixMicro() + off, ok
}

// knownCounters are the window counters a shard's master is known to hold
// (this store made them or counted on them), so that a decision on one is
// a lone INCRBY: it has its TTL. Keys name their window, so a known key is
// asked only while its window lasts; the set is emptied when it reaches
// knownMax keys rather than swept. A known counter that was deleted
// meanwhile is seen (INCRBY says the hits alone) and given its TTL.
//
// The set holds 64-bit hashes of the keys, not the keys: a map without
// pointers, which the garbage collector does not scan (65,536 strings made
// each of its mark phases last 8-15 ms under load, and the tail latency
// with them). Two keys of one hash make the second known too soon: its
// first INCRBY makes it, says so, and gives it its TTL.
type knownCounters struct {
	mu   sync.Mutex
	seed maphash.Seed
	keys map[uint64]struct{}
}

// knownMax bounds the set (made at its full size: it fills in a
// window or two under load): 16 bytes a key.
const knownMax = 1 << 16

// lookup notes in each op the hash of its key and whether its counter is
// known.
func (k *knownCounters) lookup(ops []plainOp) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.seed, k.keys = maphash.MakeSeed(), make(map[uint64]struct{}, knownMax)
	}
	for i := range ops {
		ops[i].hash = maphash.String(k.seed, ops[i].key)
		_, ops[i].known = k.keys[ops[i].hash]
	}
}

// add notes the counters the ops counted on (after lookup).
func (k *knownCounters) add(ops []plainOp) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range ops {
		if !ops[i].counted() {
			continue
		}
		if len(k.keys) >= knownMax {
			clear(k.keys)
		}
		k.keys[ops[i].hash] = struct{}{}
	}
}
