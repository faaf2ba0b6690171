package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

var (
	//go:embed approx.lua
	approxLua string
	//go:embed approx_replicas.lua
	approxReplicasLua string
)

// approxBatch bounds the counters of one sync call.
const approxBatch = 512

// sweepParts is how many rounds a sweep of the whole table takes.
const sweepParts = 8

// The syncer of approximate limits. Every interval it sends each window's
// pending hits to its Redis master (one script call per master, per 512
// counters), reads the totals back, and sets the window's new budget;
// beside it, it notes this replica in the registry and reads the replica
// count. A window is sent when it has pending hits and has synced before,
// or once half its blind budget is pending (so a key far below its limit
// is never sent), and always at the last flush. A window's hits that could
// not be sent before its counter would have expired are given up
// (counted). The syncer starts with the first approximate decision and
// stops with Drain or Close.
type approxSyncer struct {
	s       *Store
	t       *approxTable
	id      string // this replica in the registry
	sync    *redis.Script
	reg     *redis.Script
	regKey  string
	start   sync.Once
	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
	kick    chan struct{} // a first decision: register now
	// nextSweep is the next lock sweepShards sweeps; the loop's alone.
	nextSweep int
	metrics   *approxMetrics
}

func newApproxSyncer(s *Store, t *approxTable, m *approxMetrics) *approxSyncer {
	var b [8]byte
	_, _ = rand.Read(b[:])
	code := approxLua
	if s.route.cluster() {
		code = crossSlot + code
	}
	return &approxSyncer{
		s: s, t: t, id: hex.EncodeToString(b[:]), metrics: m,
		sync: redis.NewScript(code), reg: redis.NewScript(approxReplicasLua),
		regKey: s.opts.KeyPrefix + keyPrefix + "{approximate}:replicas",
		stop:   make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
	}
}

// ensure starts the loop, once.
func (y *approxSyncer) ensure() {
	y.start.Do(func() {
		y.started.Store(true)
		go y.run()
		y.kick <- struct{}{}
	})
}

// run syncs every interval until stop.
func (y *approxSyncer) run() {
	defer close(y.done)
	tick := time.NewTicker(y.t.interval)
	defer tick.Stop()
	for {
		select {
		case <-y.stop:
			return
		case <-tick.C:
		case <-y.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), y.callTimeout())
		y.syncOnce(ctx, false)
		cancel()
		y.sweepShards()
	}
}

// callTimeout bounds one round of syncs.
func (y *approxSyncer) callTimeout() time.Duration {
	return max(2*y.t.interval, 500*time.Millisecond)
}

// drain stops the loop, sends everything pending within ctx, and leaves
// the registry. Only the first call does anything.
func (y *approxSyncer) drain(ctx context.Context) error {
	var err error
	y.stopped.Do(func() {
		y.start.Do(func() {}) // from now on ensure starts nothing
		close(y.stop)
		if !y.started.Load() {
			return
		}
		<-y.done
		err = y.syncOnce(ctx, true)
		y.register(ctx, true)
	})
	return err
}

// approxOp is one window's hits on their way to Redis.
type approxOp struct {
	e        *approxEntry
	num      int64 // the window
	hits     int64
	key      string // its counter
	ttlMS    int64
	prevKey  string // a sliding window's previous counter, when its count is asked for
	index    string // the identifier's index, for an indexed request; member, its member there
	member   string
	sh       *shard
	total    int64
	prev     int64
	answered bool
}

// syncOnce runs one round: the registry, then every due window, each
// master at once. It returns the first error.
func (y *approxSyncer) syncOnce(ctx context.Context, final bool) error {
	regErr := y.register(ctx, false)
	ops := y.collect(final)
	if len(ops) == 0 {
		return regErr
	}
	byShard := y.byShard(ctx, ops)
	var wg sync.WaitGroup
	errs := make([]error, len(byShard))
	i := 0
	for sh, at := range byShard {
		wg.Add(1)
		go func(i int, sh *shard, at []int) {
			defer wg.Done()
			errs[i] = y.send(ctx, sh, ops, at)
		}(i, sh, at)
		i++
	}
	wg.Wait()
	y.apply(ops)
	return errors.Join(append(errs, regErr)...)
}

// collect moves every due window's pending hits in flight and returns them.
func (y *approxSyncer) collect(final bool) []approxOp {
	var ops []approxOp
	_, nowUS := y.t.nowUS()
	for i := range y.t.shards {
		sh := &y.t.shards[i]
		sh.mu.Lock()
		if final {
			sh.each(func(e *approxEntry) { ops = y.take(e, nowUS, true, ops) })
		} else {
			q := sh.queue
			sh.queue = nil
			for _, e := range q {
				e.queued = false
				ops = y.take(e, nowUS, false, ops)
			}
		}
		sh.mu.Unlock()
	}
	return ops
}

// take moves e's due windows' pending hits in flight and appends their ops
// to ops. Its shard's lock is held.
func (y *approxSyncer) take(e *approxEntry, nowUS int64, final bool, ops []approxOp) []approxOp {
	l := &e.req.Limit
	wUS := l.Window.Microseconds()
	e.dropExpired(y.t, nowUS)
	for _, w := range []*approxWindow{&e.prev, &e.cur} {
		if !y.t.due(w, e, final) {
			continue
		}
		op := approxOp{e: e, num: w.num, hits: w.pending}
		op.key = y.s.windowKey(&e.req, w.num*wUS)
		op.ttlMS = ((w.num+1)*wUS-nowUS)/1000 + min(expiryMargin, l.Window).Milliseconds()
		if l.Algorithm == algorithms.SlidingWindow {
			op.ttlMS += l.Window.Milliseconds()
			if w == &e.cur && w.prevCount < 0 {
				op.prevKey = y.s.windowKey(&e.req, (w.num-1)*wUS)
			}
		}
		if !e.req.Unindexed {
			op.index = y.s.indexKey(e.req.Key.Scope, e.req.Key.Identifier)
			op.member = algorithms.StateName(&e.req)
		}
		w.inflight += w.pending
		w.pending = 0
		ops = append(ops, op)
	}
	return ops
}

// sweepShards sweeps approxShards/sweepParts of the table's locks, the next
// ones each round: every entry is looked at once every sweepParts rounds.
func (y *approxSyncer) sweepShards() {
	_, nowUS := y.t.nowUS()
	for range approxShards / sweepParts {
		sh := &y.t.shards[y.nextSweep]
		y.nextSweep = (y.nextSweep + 1) % approxShards
		sh.mu.Lock()
		sh.sweep(y.t, nowUS)
		sh.mu.Unlock()
	}
}

// due reports whether w is sent in this round: it has pending hits, and it
// has synced before, or half its blind budget is pending, or it is the
// previous window, or this is the last flush.
func (t *approxTable) due(w *approxWindow, e *approxEntry, final bool) bool {
	if w.num == 0 || w.pending == 0 {
		return false
	}
	return final || w == &e.prev || w.syncedAt != 0 || 2*w.pending >= t.blind(e.req.Limit.Limit)
}

// byShard groups ops by the Redis master of their keys.
func (y *approxSyncer) byShard(ctx context.Context, ops []approxOp) map[*shard][]int {
	out := map[*shard][]int{}
	y.s.route.ready(ctx)
	for i := range ops {
		sh := y.s.route.shardOfRequest(&ops[i].e.req)
		ops[i].sh = sh
		out[sh] = append(out[sh], i)
	}
	return out
}

// send runs the sync script on sh for the ops at positions at, in calls
// of up to approxBatch counters, and notes the answers in the ops.
func (y *approxSyncer) send(ctx context.Context, sh *shard, ops []approxOp, at []int) error {
	if sh == nil {
		return fmt.Errorf("redis: approximate sync: %w", errNoMaster)
	}
	if sh.client == nil { // slots no master serves: down like a dead one
		sh.approxFailed(time.Now())
		return fmt.Errorf("redis: approximate sync: %w", errNoMaster)
	}
	for len(at) > 0 {
		part := at[:min(len(at), approxBatch)]
		at = at[len(part):]
		sent := time.Now()
		res, err := y.call(ctx, sh, ops, part)
		got := time.Now()
		y.metrics.observe(got.Sub(sent), err)
		if err != nil {
			sh.approxFailed(got)
			return fmt.Errorf("redis: approximate sync: %w", err)
		}
		sh.approxAnswered(got)
		if len(res) != 2+2*len(part) {
			return fmt.Errorf("redis: approximate sync: %d values in the reply, want %d", len(res), 2+2*len(part))
		}
		if !y.t.fixedNow {
			y.t.sample(sent, got, time.Unix(res[0], res[1]*1000))
		}
		for j, i := range part {
			ops[i].total, ops[i].prev, ops[i].answered = res[2+2*j], res[3+2*j], true
		}
	}
	return nil
}

// call is one script call for the ops at positions part.
func (y *approxSyncer) call(ctx context.Context, sh *shard, ops []approxOp, part []int) ([]int64, error) {
	keys := make([]string, 0, len(part))
	args := make([]any, 0, 1+4*len(part))
	args = append(args, "")
	for _, i := range part {
		op := &ops[i]
		keys = append(keys, op.key)
		prev := "0"
		if op.prevKey != "" {
			keys = append(keys, op.prevKey)
			prev = "1"
		}
		if op.index != "" {
			keys = append(keys, op.index)
		}
		args = append(args, strconv.FormatInt(op.hits, 10), strconv.FormatInt(max(op.ttlMS, 1), 10), prev, op.member)
	}
	keys, args = y.s.route.pack(keys, args, 0)
	return y.sync.Run(ctx, sh.client, keys, args...).Int64Slice()
}

// apply notes each op's answer in its window: the shared total, a sliding
// window's previous count, and the new budget, this replica's share of
// what is left; an op not answered puts its hits back to pending.
func (y *approxSyncer) apply(ops []approxOp) {
	local, nowUS := y.t.nowUS()
	n, rank := y.t.n(), min(y.t.rank.Load(), y.t.n()-1)
	for i := range ops {
		op := &ops[i]
		_, sh := y.t.hash(&op.e.req)
		sh.mu.Lock()
		if e := op.e; e != nil {
			w := e.window(op.num)
			switch {
			case w == nil && !op.answered:
				y.t.dropped.Add(op.hits) // its window is gone: given up
			case w == nil: // rolled past meanwhile; the hits are in Redis
			case !op.answered:
				w.inflight -= op.hits
				w.pending += op.hits
				sh.enqueue(e)
			default:
				w.inflight -= op.hits
				w.global = op.total
				if op.prev >= 0 {
					w.prevCount = op.prev
				}
				w.syncedAt = local.UnixNano()
				w.budget = max(0, (e.left(w, nowUS)+rank)/n)
			}
		}
		sh.mu.Unlock()
	}
}
