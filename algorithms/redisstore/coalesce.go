package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
)

// maxCallWait bounds a merged call whose callers have no deadline.
const maxCallWait = 5 * time.Second

// overlapAfter is how long a call is out before another may leave beside
// it: several round trips within a data centre, so that only a call that
// is late lets the next one overtake it.
const overlapAfter = time.Millisecond

// maxYields bounds how many times a worker lets the goroutines ready to run
// go first before it drains the queue (coalescer.gather).
const maxYields = 4

// coalescer merges the batches of concurrent Check calls into one script
// call. Workers take the first waiting batch at once — an idle store adds no
// delay — and, while they are busy, the batches that arrive meanwhile wait
// and leave together: under load one round trip decides many callers.
//
// One call is out at a time unless it is slow: a worker takes the turn to
// send, and gives it up when its call returns or has been out for
// overlapAfter, whichever comes first. On a quick link the batches that
// arrive during one round trip leave together in the next, where two
// workers would each send half of them: a third fewer calls at 64 Envoy
// calls in flight, and 1.1 µs less Redis CPU a decision on distinct keys
// (measured at e03dc16). A call that hangs (a lost packet, a slow command)
// holds the others back no longer than overlapAfter.
type coalescer struct {
	decide   func(ctx context.Context, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error)
	queue    chan *waiting
	maxBatch int
	// turn is held (a value in it) by the worker that may send next, or
	// whose call is out and not yet overlap old.
	turn    chan struct{}
	overlap time.Duration
	stop    context.CancelFunc
	wg      sync.WaitGroup
	pool    sync.Pool // of *waiting, with their done channels
	// tracer makes the spans of trace.go; nil: none.
	tracer trace.Tracer
}

type waiting struct {
	ctx      context.Context
	deadline time.Time // when the caller stops waiting; zero: ctx's
	reqs     []algorithms.Request
	done     chan checkResult // buffered: a worker never blocks on a caller gone
	taken    atomic.Bool      // a worker has it: it may be on its way to Redis
	// timer fires at deadline. It is the waiting's own, reused with it:
	// a context with a deadline for every check cost 7 % of the Envoy
	// service's CPU (a timer, a context and their cancellation each time).
	timer *time.Timer
}

type checkResult struct {
	ds  []algorithms.Decision
	err error
}

// newCoalescer starts workers that send batches of up to maxBatch requests
// with decide, a second call beside one that has been out for overlap.
func newCoalescer(workers, maxBatch int, overlap time.Duration, decide func(context.Context, []algorithms.Request, []int) ([]algorithms.Decision, error)) *coalescer {
	ctx, stop := context.WithCancel(context.Background())
	c := &coalescer{decide: decide, queue: make(chan *waiting, 4*workers*maxBatch), maxBatch: maxBatch, stop: stop,
		turn: make(chan struct{}, 1), overlap: overlap}
	c.pool.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &waiting{done: make(chan checkResult, 1), timer: t}
	}
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.work(ctx)
		}()
	}
	return c
}

// check queues reqs and waits for their decisions, for ctx, or until
// deadline (none when zero). When the wait ends before a worker took the
// batch, nothing was sent: the error wraps ErrOverloaded, since the time
// went in Throttle's own queue. When it ends after, the error is
// context.DeadlineExceeded (deadline) or ctx's.
func (c *coalescer) check(ctx context.Context, deadline time.Time, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	w := c.pool.Get().(*waiting)
	w.ctx, w.deadline, w.reqs = ctx, deadline, reqs
	w.taken.Store(false)
	queued := time.Now()
	var expired <-chan time.Time
	if !deadline.IsZero() {
		w.timer.Reset(deadline.Sub(queued))
		expired = w.timer.C
	}
	select {
	case c.queue <- w:
	case <-ctx.Done():
		w.timer.Stop()
		return nil, fmt.Errorf("the queue to Redis stayed full for %v: %w", time.Since(queued), algorithms.ErrOverloaded)
	case <-expired:
		return nil, fmt.Errorf("the queue to Redis stayed full for %v: %w", time.Since(queued), algorithms.ErrOverloaded)
	}
	var err error
	select {
	case r := <-w.done:
		// The worker is done with w: it sent last. (A w whose caller left
		// is not reused: a worker may still send on it.)
		w.timer.Stop()
		w.ctx, w.reqs = nil, nil
		c.pool.Put(w)
		return r.ds, r.err
	case <-ctx.Done():
		w.timer.Stop()
		err = ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	}
	if !w.taken.Load() {
		return nil, fmt.Errorf("waited %v in the queue to Redis: %w", time.Since(queued), algorithms.ErrOverloaded)
	}
	return nil, err
}

func (c *coalescer) work(ctx context.Context) {
	// late gives the turn up when a call has been out for c.overlap; Stop
	// says whether it had not yet (then the worker gives it up). Every
	// turn taken is given up once.
	late := time.AfterFunc(time.Hour, func() { <-c.turn })
	late.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case c.turn <- struct{}{}:
		}
		var first *waiting
		select {
		case <-ctx.Done():
			<-c.turn
			return
		case first = <-c.queue:
		}
		c.gather()
		group := []*waiting{first}
		n := len(first.reqs)
	drain:
		for n < c.maxBatch {
			select {
			case w := <-c.queue:
				group = append(group, w)
				n += len(w.reqs)
			default:
				break drain
			}
		}
		late.Reset(c.overlap)
		c.run(group, n)
		if late.Stop() {
			<-c.turn
		}
	}
}

// gather lets the goroutines that are ready to run go first, as long as
// the queue grows meanwhile, before a worker drains it: under load they are
// mostly callers about to queue a batch, which then leave in this call
// rather than in the next. An idle process has none and the worker goes on
// at once; no timer, no fixed delay. At 64 Envoy calls in flight on two
// cores: 35–40 % fewer Redis calls, ~1.5 µs less Redis CPU and ~3 µs less
// service CPU a decision on distinct keys (measured at 947c2a8).
func (c *coalescer) gather() {
	for range maxYields {
		queued := len(c.queue)
		runtime.Gosched()
		if len(c.queue) == queued {
			return
		}
	}
}

// run decides a group in one call, bounded by the latest of its callers'
// deadlines: a caller with a shorter one stops waiting on its own, and the
// call goes on for the others rather than failing them all.
func (c *coalescer) run(group []*waiting, n int) {
	live := group[:0]
	var deadline time.Time
	now := time.Now()
	for _, w := range group {
		w.taken.Store(true)
		if w.ctx.Err() != nil || (!w.deadline.IsZero() && !now.Before(w.deadline)) {
			continue // its caller has given up
		}
		d := w.deadline
		if dl, ok := w.ctx.Deadline(); ok && (d.IsZero() || dl.Before(d)) {
			d = dl
		}
		if d.IsZero() {
			d = now.Add(maxCallWait)
		}
		if d.After(deadline) {
			deadline = d
		}
		live = append(live, w)
	}
	if len(live) == 0 {
		return
	}
	reqs := make([]algorithms.Request, 0, n)
	sizes := make([]int, len(live))
	for i, w := range live {
		reqs = append(reqs, w.reqs...)
		sizes[i] = len(w.reqs)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	ctx, endSpan := c.traceBatch(ctx, live, n)
	ds, err := c.decide(ctx, reqs, sizes)
	endSpan(err)
	cancel()
	for _, w := range live {
		// After the send w is its caller's again (and may be reused).
		if err != nil {
			w.done <- checkResult{err: err}
			continue
		}
		n := len(w.reqs)
		w.done <- checkResult{ds: ds[:n:n]}
		ds = ds[n:]
	}
}

// close stops the workers and waits for them.
func (c *coalescer) close() {
	c.stop()
	c.wg.Wait()
}
