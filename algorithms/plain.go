package algorithms

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fixed window without Lua. A fixed window's state is a plain counter
// per window, so a decision needs no script: INCRBY adds the hits and says
// the count, PEXPIRE gives a new counter its TTL (the same expiry each time:
// the window's end), both pipelined with every other request of the batch.
// A script call costs Redis about three times as many instructions per
// decision as the two commands (docs/benchmarks.md), and Redis does not
// scale with Throttle's replicas.
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
// (clock.go), so replicas on skewed hosts agree on where a window starts.
//
// Only unindexed fixed windows go this way (the Envoy service's counters,
// which nothing resets by identifier); a caller's requests go together,
// all this way or all by the script.

// expiryMargin is how long a window's counter outlives its window, at most:
// the uncertainty of the clock's offset from Redis's (clock.go) must never
// let a counter expire while a replica still counts in its window.
const expiryMargin = 100 * time.Millisecond

// plainEligible reports whether r can be decided without the script.
func plainEligible(r *Request) bool {
	return r.Limit.Algorithm == FixedWindow && r.Unindexed
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

// plainOp is what the pipeline sends for one request.
type plainOp struct {
	incr *redis.IntCmd    // the hits counted; nil when only read
	get  *redis.StringCmd // the count read; nil when counted
}

// decidePlain decides a batch of plain-eligible requests on sh's master in
// one pipeline, then refunds what must not stay counted.
func (s *RedisStore) decidePlain(ctx context.Context, sh *shard, reqs []Request, sizes []int) ([]Decision, error) {
	nowUS, err := s.plainNow(ctx, sh)
	if err != nil {
		return nil, err
	}
	pipe := sh.client.Pipeline()
	var clock *redis.TimeCmd
	if s.now == nil {
		clock = pipe.Time(ctx)
	}
	ops := make([]plainOp, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		w := r.Limit.Window.Microseconds()
		key := s.windowKey(r, nowUS)
		if r.Hits == 0 || (r.Hits > r.Limit.Limit && !r.AlwaysCount) {
			// A read: a peek, or hits that cannot be within the limit.
			ops[i].get = pipe.Get(ctx, key)
			continue
		}
		end := nowUS - nowUS%w + w
		ttl := time.Duration(end-nowUS)*time.Microsecond + min(expiryMargin, r.Limit.Window)
		ops[i].incr = pipe.IncrBy(ctx, key, r.Hits)
		pipe.PExpire(ctx, key, ttl)
	}
	sent := time.Now()
	cmds, _ := pipe.Exec(ctx)
	err = nil
	for _, c := range cmds {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
			err = e
			break
		}
	}
	if err != nil {
		// Some commands may have run: take back what they counted.
		s.refundPlain(ctx, sh, reqs, ops, nowUS, func(int) bool { return true })
		return nil, fmt.Errorf("redis: %w", err)
	}
	if clock != nil {
		sh.clock.sample(sent, time.Now(), clock.Val())
	}
	sh.answered.Store(time.Now().UnixNano())
	fs := make([]found, len(reqs))
	start := func(r *Request) int64 { w := r.Limit.Window.Microseconds(); return nowUS - nowUS%w }
	for i := range reqs {
		r := &reqs[i]
		var before int64
		if op := ops[i]; op.incr != nil {
			before = op.incr.Val() - r.Hits
		} else if v, err := op.get.Int64(); err == nil {
			before = v
		} else if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redis: counter %q: %w", op.get.Args()[1], err)
		}
		fs[i] = found{within: before+r.Hits <= r.Limit.Limit, window: windowState{start: start(r), count: before}}
	}
	// Refund: the counted hits of requests over their limit, and of the
	// requests of a void group.
	voided := make([]bool, len(reqs))
	groups(len(reqs), sizes, func(_, from, to int) {
		if !allOrNothing(reqs[from:to]) {
			return
		}
		void := false
		for i := from; i < to; i++ {
			void = void || (reqs[i].AllOrNothing && !fs[i].within)
		}
		for i := from; i < to; i++ {
			voided[i] = void && reqs[i].AllOrNothing
		}
	})
	refunded := s.refundPlain(ctx, sh, reqs, ops, nowUS, func(i int) bool { return !fs[i].within || voided[i] })
	ds, err := decideAll(reqs, sizes, fs, nowUS)
	if err != nil {
		return nil, err
	}
	if !refunded {
		// The hits stay counted: over-counting, never under. Say so.
		for i := range ds {
			if voided[i] && ops[i].incr != nil && fs[i].within && !reqs[i].AlwaysCount {
				ds[i].Counted = true
			}
		}
	}
	return ds, nil
}

// refundPlain takes back the hits counted for the requests that refund
// selects (an AlwaysCount request keeps them) and reports whether it did.
func (s *RedisStore) refundPlain(ctx context.Context, sh *shard, reqs []Request, ops []plainOp, nowUS int64, refund func(int) bool) bool {
	var at []int
	for i := range reqs {
		if ops[i].incr != nil && ops[i].incr.Err() == nil && !reqs[i].AlwaysCount && refund(i) {
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
