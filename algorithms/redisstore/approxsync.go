package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
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

// The syncer of approximate limits. Every interval it calls each busy
// window's Redis master (one script call per master, per 512 counters):
// it reports the hits admitted since the window's last call and resizes
// its lease to about two intervals of this replica's demand (the unused
// part goes back; a window of a replica gone idle holds nothing); beside
// it, it notes this replica in the registry and reads the replica count.
// A window is sent when it holds a lease, or has pending hits and has had
// an answer before, or once half its blind budget is pending (so a key far
// below its limit is never sent), or when requests it refused want more,
// and always at the last flush. A window's hits that could not be sent
// before its counter would have expired are given up (counted, those no
// lease covered). The syncer starts with the first approximate decision
// and stops with Drain or Close.
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
	// nextSweep is the next lock sweepStripes sweeps; the loop's alone.
	nextSweep int
	metrics   *approxMetrics
	// joined is when this replica first noted itself in the registry
	// (Unix ns; 0: not yet).
	joined atomic.Int64
	// stopping: Drain has begun; leases go back and asks take only what
	// they need.
	stopping atomic.Bool
	// sending is read-held while a round's hits, taken from the table,
	// are on their way to Redis; Clear and Reset that forgot an entry wait
	// for it (awaitSends) so that a round that left before them cannot
	// count again what they delete.
	sending sync.RWMutex
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
		y.sweepStripes()
	}
}

// callTimeout bounds one round of syncs, and an ask.
func (y *approxSyncer) callTimeout() time.Duration { return y.t.callTimeout() }

// drain stops the loop, sends everything pending within ctx, and leaves
// the registry. Only the first call does anything.
func (y *approxSyncer) drain(ctx context.Context) error {
	var err error
	y.stopped.Do(func() {
		y.start.Do(func() {}) // from now on ensure starts nothing
		y.stopping.Store(true)
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

// syncOnce runs one round: the registry and every due window, each master
// at once (a hung registry's master must not hold the syncs back: they are
// what marks a master failing). It returns the first error.
func (y *approxSyncer) syncOnce(ctx context.Context, final bool) error {
	var regErr error
	registered := make(chan struct{})
	go func() {
		defer close(registered)
		regErr = y.register(ctx, false)
	}()
	registry := func() error { <-registered; return regErr }
	y.sending.RLock()
	defer y.sending.RUnlock()
	ops := y.collect(final)
	if len(ops) == 0 {
		y.probeFailing(ctx, nil)
		return registry()
	}
	byMaster := y.byMaster(ctx, ops)
	y.probeFailing(ctx, byMaster)
	var wg sync.WaitGroup
	errs := make([]error, len(byMaster))
	i := 0
	for sh, at := range byMaster {
		wg.Add(1)
		go func(i int, sh *master, at []int) {
			defer wg.Done()
			errs[i] = y.send(ctx, sh, ops, at)
		}(i, sh, at)
		i++
	}
	wg.Wait()
	y.apply(ops, false)
	return errors.Join(append(errs, registry())...)
}

// probeFailing pings each master whose syncs fail and that this round
// sends nothing (busy, those it syncs): one that answers is up again. Its
// approximate limits are the failure policy's while it is down, so no
// hit of theirs would be due to tell it so.
func (y *approxSyncer) probeFailing(ctx context.Context, busy map[*master][]int) {
	for _, sh := range y.s.route.masters() {
		if sh == nil || sh.client == nil || sh.syncFailing.Load() == 0 || len(busy[sh]) > 0 {
			continue
		}
		if err := sh.client.Ping(ctx).Err(); err == nil {
			sh.approxAnswered(time.Now())
		}
	}
}

// awaitSends waits for the round in flight, if any, to be answered.
func (y *approxSyncer) awaitSends() {
	y.sending.Lock()
	y.sending.Unlock() // a barrier: it guards nothing itself
}

// collect moves every due window's pending hits in flight and returns them.
func (y *approxSyncer) collect(final bool) []approxOp {
	var ops []approxOp
	local, nowUS := y.t.nowUS()
	localNS := local.UnixNano()
	for i := range y.t.stripes {
		st := &y.t.stripes[i]
		st.mu.Lock()
		if final {
			st.each(func(e *approxEntry) { ops = y.takeDue(e, nowUS, localNS, true, ops) })
		} else {
			q := st.queue
			st.queue = nil
			for _, e := range q {
				e.queued = false
				if e.dropped {
					continue // forgotten (Clear, Reset) or over
				}
				ops = y.takeDue(e, nowUS, localNS, false, ops)
			}
		}
		st.mu.Unlock()
	}
	return ops
}

// takeDue appends to ops the calls of e's due windows. Its stripe's lock
// is held.
func (y *approxSyncer) takeDue(e *approxEntry, nowUS, localNS int64, final bool, ops []approxOp) []approxOp {
	e.dropExpired(y.t, nowUS)
	for _, w := range []*approxWindow{&e.prev, &e.cur} {
		if y.t.due(w, e, final) {
			ops = append(ops, y.take(e, w, nowUS, localNS, 0))
		}
	}
	return ops
}

// take starts the call of w, a window of e, at nowUS (localNS): its
// pending hits go in flight, and its target lease is its demand over the
// table's horizon (two intervals and two round trips), at least need (an ask's hits), or nothing for a window that is
// over or the last flush. Its stripe's lock is held.
func (y *approxSyncer) take(e *approxEntry, w *approxWindow, nowUS, localNS, need int64) approxOp {
	l := &e.req.Limit
	wUS := l.Window.Microseconds()
	op := approxOp{e: e, num: w.num, hits: w.pending, need: need, covered: min(w.pending, max(0, w.held-w.inflight))}
	if w == &e.cur {
		op.target = e.target(localNS, y.t.horizon().Nanoseconds())
		if y.stopping.Load() {
			op.target = 0 // leaving: no lease past what an ask needs
		}
		op.target = max(op.target, need)
	} else {
		op.need = 0 // over: its lease goes back
	}
	op.leaseTTL = y.t.leaseTTL(l)
	op.key = y.s.windowKey(&e.req, w.num*wUS)
	op.leaseKey = y.s.leaseKey(&e.req, w.num)
	op.ttlMS = ((w.num+1)*wUS-nowUS)/1000 + min(expiryMargin, l.Window).Milliseconds()
	if l.Algorithm == algorithms.SlidingWindow {
		op.ttlMS += l.Window.Milliseconds()
		op.prevKey = y.s.windowKey(&e.req, (w.num-1)*wUS)
	}
	if !e.req.Unindexed {
		op.index = y.s.indexKey(e.req.Key.Scope, e.req.Key.Identifier)
		op.member = algorithms.StateName(&e.req)
	}
	w.inflight += w.pending
	w.reported += w.pending
	op.reported = w.reported
	op.back, op.backNew = w.back, w.back-w.backSent
	w.pending = 0
	w.flight = &approxFlight{done: make(chan struct{})}
	op.flight = w.flight
	return op
}

// sweepStripes sweeps approxStripes/sweepParts of the table's locks, the next
// ones each round: every entry is looked at once every sweepParts rounds.
func (y *approxSyncer) sweepStripes() {
	_, nowUS := y.t.nowUS()
	for range approxStripes / sweepParts {
		st := &y.t.stripes[y.nextSweep]
		y.nextSweep = (y.nextSweep + 1) % approxStripes
		st.mu.Lock()
		st.sweep(y.t, nowUS)
		st.mu.Unlock()
	}
}
