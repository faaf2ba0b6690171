package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

// errNoMaster is the failure of a request whose slot no master serves (its
// master died and no replica took over): the failure policy answers it.
var errNoMaster = errors.New("CLUSTERDOWN: no master serves the slot")

// master is one Redis master and what Throttle keeps for it: its client, its
// coalescing workers, and when it last answered. A single Redis, or
// Sentinel's current master, is one master named "".
type master struct {
	name   string
	client redis.Cmdable // nil: the slot has no master (errNoMaster)
	// lua is how this master runs the engine: luaUnknown until a call
	// told; luaFunction (FCALL, the library loaded when it was missing), or
	// luaEval (EVALSHA: Redis 6, or FUNCTION LOAD refused).
	lua   atomic.Int32
	ping  func(context.Context) error
	merge *coalescer // nil unless Options.Coalesce
	// answered is when this master last answered (Unix ns): Guard's
	// evidence that it is up when a call of its own times out.
	answered atomic.Int64
	// clock is this master's clock, for the decisions made without the
	// script (plain.go).
	clock redisClock
	known knownCounters
	close func() error
	// syncOK is when this master last answered an approximate sync (Unix
	// ns); syncFailing, since when its syncs fail (0: they do not).
	syncOK, syncFailing atomic.Int64
	// waitingSince is when the first call sent to this master after its
	// last answer was sent (Unix ns; 0: none yet): with no answer since,
	// its calls have waited that long.
	waitingSince atomic.Int64
}

// sent notes a call sent to this master at now: the first since its last
// answer starts a wait.
func (sh *master) sent(now time.Time) {
	ws := sh.waitingSince.Load()
	if ws == 0 || sh.answered.Load() >= ws {
		sh.waitingSince.CompareAndSwap(ws, now.UnixNano())
	}
}

// hung reports whether this master has left calls unanswered for after,
// at now: a call was sent that long ago and it has answered nothing since.
// A master nobody asked is not hung, however long it has been silent.
func (sh *master) hung(now time.Time, after time.Duration) bool {
	ws := sh.waitingSince.Load()
	return ws != 0 && sh.answered.Load() < ws && now.UnixNano()-ws >= after.Nanoseconds()
}

// approxAnswered notes an approximate sync this master answered at t.
func (sh *master) approxAnswered(t time.Time) {
	sh.syncOK.Store(t.UnixNano())
	sh.syncFailing.Store(0)
	sh.answered.Store(t.UnixNano())
}

// approxFailed notes an approximate sync that failed at t.
func (sh *master) approxFailed(t time.Time) {
	sh.syncFailing.CompareAndSwap(0, t.UnixNano())
}

// approxDown reports whether this master's approximate syncs have failed
// for longer than after, at now: its approximate limits are then decided
// by the failure policy (Guard).
func (sh *master) approxDown(now time.Time, after time.Duration) bool {
	since := sh.syncFailing.Load()
	return since != 0 && now.UnixNano()-since > after.Nanoseconds()
}

// lastAnswer returns when the master last answered; zero if never.
func (sh *master) lastAnswer() time.Time {
	if ns := sh.answered.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (s *Store) newMaster(name string, c redis.Cmdable, ping func(context.Context) error, close func() error) *master {
	sh := &master{name: name, client: c, ping: ping, close: close}
	if s.opts.Coalesce > 0 {
		sh.merge = newCoalescer(s.opts.Coalesce, s.opts.MaxBatch, overlapAfter, func(ctx context.Context, reqs []algorithms.Request, sizes []int) ([]algorithms.Decision, error) {
			return s.decide(ctx, sh, reqs, sizes)
		})
		sh.merge.tracer = s.tracer
	}
	return sh
}

// onMaster decides a validated batch that one master holds: through its
// coalescing workers when there are some (the checks that arrive while a
// script call is in flight leave together in the next one, so under load one
// round trip decides many callers, and an idle store waits for nothing: a
// worker takes the first at once), in a span when tracing. It gives up at
// deadline, if not zero, or when ctx ends.
func (s *Store) onMaster(ctx context.Context, deadline time.Time, sh *master, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	ctx, end := s.traceCheck(ctx, sh, reqs)
	var ds []algorithms.Decision
	var err error
	switch {
	case sh.merge != nil:
		ds, err = sh.merge.check(ctx, deadline, reqs)
	case !deadline.IsZero():
		dctx, cancel := context.WithDeadline(ctx, deadline)
		ds, err = s.decide(dctx, sh, reqs, nil)
		cancel()
	default:
		ds, err = s.decide(ctx, sh, reqs, nil)
	}
	end(err)
	return ds, err
}

// pingMaster PINGs one master and notes its answer.
func pingMaster(ctx context.Context, sh *master) error {
	err := sh.ping(ctx)
	if err == nil {
		sh.answered.Store(time.Now().UnixNano())
	}
	return err
}
