package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// One call of approx.lua: the ops of one master's windows, their
// arguments, and their answers noted in the table.

// approxOp is one window's call on its way to Redis.
type approxOp struct {
	e        *approxEntry
	num      int64 // the window
	hits     int64 // admitted since the window's last call
	target   int64 // the lease asked for
	need     int64 // the least lease an ask needs (0: a sync)
	key      string
	prevKey  string // a sliding window's previous counter ("" for a fixed one)
	leaseKey string
	ttlMS    int64
	leaseTTL time.Duration // how long the lease asked for lasts unless renewed (leaseTTL at take)
	index    string        // the identifier's index, for an indexed request; member, its member there
	member   string
	covered  int64 // of hits, those the lease covered when the call began
	reported int64 // the window's running total of hits sent, these included (approxWindow.reported)
	back     int64 // its running total of hits taken back after they were sent (approxWindow.back)
	backNew  int64 // what back grew by since the window's last answer
	flight   *approxFlight
	sh       *master
	total    int64 // the answer: the counter, the lease, the previous counter,
	held     int64 // the excess its hits made
	prev     int64
	excess   int64
	sent     time.Time // when the call that answered it was sent (local, monotonic)
	answered bool
}

// approxReply is how many values approx.lua answers per counter.
const approxReply = 4

// byMaster groups ops by the Redis master of their keys.
func (y *approxSyncer) byMaster(ctx context.Context, ops []approxOp) map[*master][]int {
	out := map[*master][]int{}
	y.s.route.ready(ctx)
	for i := range ops {
		sh := y.s.route.masterOfRequest(&ops[i].e.req)
		ops[i].sh = sh
		out[sh] = append(out[sh], i)
	}
	return out
}

// send runs the sync script on sh for the ops at positions at, in calls
// of up to approxBatch counters, and notes the answers in the ops.
func (y *approxSyncer) send(ctx context.Context, sh *master, ops []approxOp, at []int) error {
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
		if err := ctx.Err(); err != nil {
			// The round's time went before this call was sent (a starved
			// CPU, the table's locks): not the master's failure.
			return fmt.Errorf("redis: approximate sync: not sent: %w", err)
		}
		sent := time.Now()
		res, err := y.call(ctx, sh, ops, part)
		got := time.Now()
		y.metrics.observe(got.Sub(sent), err)
		if err == nil {
			y.t.noteRoundTrip(got.Sub(sent))
		}
		if err != nil {
			sh.approxFailed(got)
			return fmt.Errorf("redis: approximate sync: %w", err)
		}
		sh.approxAnswered(got)
		if err := y.note(ops, part, res, sent, got); err != nil {
			return err
		}
	}
	return nil
}

// note notes in the ops at positions part the reply res of their call,
// sent and answered at those local times.
func (y *approxSyncer) note(ops []approxOp, part []int, res []int64, sent, got time.Time) error {
	if len(res) != 2+approxReply*len(part) {
		return fmt.Errorf("redis: approximate sync: %d values in the reply, want %d", len(res), 2+approxReply*len(part))
	}
	if !y.t.fixedNow {
		y.t.clock.sample(sent, got, time.Unix(res[0], res[1]*1000))
	}
	for j, i := range part {
		v := res[2+approxReply*j:]
		op := &ops[i]
		op.total, op.held, op.prev, op.excess = v[0], v[1], v[2], v[3]
		op.sent, op.answered = sent, true
	}
	return nil
}

// call is one script call for the ops at positions part.
func (y *approxSyncer) call(ctx context.Context, sh *master, ops []approxOp, part []int) ([]int64, error) {
	keys := make([]string, 0, 3*len(part))
	args := make([]any, 0, 3+12*len(part))
	args = append(args, "", y.id, strconv.FormatInt(y.t.shares(), 10))
	for _, i := range part {
		op := &ops[i]
		keys = append(keys, op.key)
		window := "0"
		if op.prevKey != "" {
			keys = append(keys, op.prevKey)
			window = strconv.FormatInt(op.e.req.Limit.Window.Microseconds(), 10)
		}
		keys = append(keys, op.leaseKey)
		if op.index != "" {
			keys = append(keys, op.index)
		}
		args = append(args, strconv.FormatInt(op.hits, 10), strconv.FormatInt(max(op.ttlMS, 1), 10),
			strconv.FormatInt(op.e.req.Limit.Limit, 10), window, strconv.FormatInt(op.num, 10),
			strconv.FormatInt(op.target, 10), strconv.FormatInt(op.need, 10), op.member,
			strconv.FormatInt(op.leaseTTL.Microseconds(), 10), strconv.FormatInt(op.reported, 10),
			strconv.FormatInt(op.back, 10), strconv.FormatInt(op.backNew, 10))
	}
	keys, args = y.s.route.pack(keys, args, 0)
	return y.sync.Run(ctx, sh.client, keys, args...).Int64Slice()
}

// apply notes each op's answer in its window (approxTable.answer) and
// ends its flight; an op not answered puts its hits back to pending, and
// when it was an ask (asked), the window is decided from memory until an
// answer comes.
func (y *approxSyncer) apply(ops []approxOp, asked bool) {
	local, nowUS := y.t.nowUS()
	for i := range ops {
		op := &ops[i]
		_, st := y.t.hash(&op.e.req)
		st.mu.Lock()
		e := op.e
		w := e.window(op.num)
		switch {
		case w == nil && !op.answered:
			y.t.dropped.Add(op.hits - op.covered) // its window is gone: given up
		case w == nil: // rolled past meanwhile; the hits are in Redis
		case !op.answered:
			w.inflight -= op.hits
			w.pending += op.hits
			w.reported -= op.hits // sent again with the next call
			w.askFailed = w.askFailed || asked
			st.enqueue(e)
		default:
			w.inflight -= op.hits
			y.t.answer(e, w, op, local.UnixNano(), nowUS)
		}
		if w != nil && w.flight == op.flight {
			w.flight = nil
		}
		close(op.flight.done)
		y.t.queueDue(st, e)
		st.mu.Unlock()
	}
}

// answer notes in w, a window of e, the answer to op at localNS (nowUS):
// the counter, this replica's lease, a sliding window's previous count,
// and whether anything is left to grant. st.mu is held.
func (t *approxTable) answer(e *approxEntry, w *approxWindow, op *approxOp, localNS, nowUS int64) {
	w.global, w.held = op.total, op.held
	w.backSent = max(w.backSent, op.back)
	w.leaseUntil = t.mono(op.sent) + op.leaseTTL.Nanoseconds()
	if op.excess > 0 {
		t.excess.Add(op.excess)
	}
	if op.prev >= 0 && w == &e.cur {
		w.prevCount = op.prev
	}
	w.syncedAt = localNS
	w.askFailed = false
	w.exhausted = e.left(w, nowUS) < 1
}
