package redisstore

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestCoalescerDeadline: a caller stops waiting at its deadline, with no
// context of its own. A batch a worker took ends in DeadlineExceeded (it
// may have reached Redis); one still queued behind a hung call in
// ErrOverloaded (it never left Throttle), and the worker then drops it
// instead of sending it. The call runs until its caller's deadline.
func TestCoalescerDeadline(t *testing.T) {
	var calls atomic.Int32
	gotDeadline := make(chan time.Time, 4)
	release := make(chan struct{})
	c := newCoalescer(1, 16, overlapAfter, func(ctx context.Context, reqs []algorithms.Request, _ []int) ([]algorithms.Decision, error) {
		calls.Add(1)
		d, _ := ctx.Deadline()
		gotDeadline <- d
		select { // a master that never answers
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-release:
			return nil, errors.New("released")
		}
	})
	defer c.close()
	defer close(release) // before close: the last call waits for its deadline
	req := []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: "id"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}, Hits: 1}}

	hung := make(chan error, 1)
	start := time.Now()
	deadlineA := start.Add(300 * time.Millisecond)
	go func() {
		_, err := c.check(context.Background(), deadlineA, req)
		hung <- err
	}()
	if d := <-gotDeadline; !d.Equal(deadlineA) {
		t.Fatalf("the call's deadline is %v, want its caller's %v", d, deadlineA)
	}
	// The worker is busy with the hung call: this one waits in the queue.
	_, err := c.check(context.Background(), time.Now().Add(50*time.Millisecond), req)
	if !errors.Is(err, algorithms.ErrOverloaded) {
		t.Fatalf("a batch left in the queue past its deadline: %v, want ErrOverloaded", err)
	}
	if err := <-hung; !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, algorithms.ErrOverloaded) {
		t.Fatalf("a batch taken and hung past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("the taken batch's caller waited %v, want its deadline (300 ms)", waited)
	}
	// The worker takes the expired batch next and drops it.
	time.Sleep(100 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1: a batch whose caller has given up is not sent", n)
	}

	// A caller's own context still ends its wait before its deadline.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-gotDeadline; cancel() }()
	if _, err := c.check(ctx, time.Now().Add(time.Minute), req); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller whose context was cancelled: %v, want context.Canceled", err)
	}
}

// blockingDecide is a decide that reports each call's batch on calls and
// answers it when released.
func blockingDecide(calls chan<- []algorithms.Request, release <-chan struct{}) func(context.Context, []algorithms.Request, []int) ([]algorithms.Decision, error) {
	return func(ctx context.Context, reqs []algorithms.Request, _ []int) ([]algorithms.Decision, error) {
		calls <- reqs
		select {
		case <-release:
			return make([]algorithms.Decision, len(reqs)), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// blockedCoalescer is a coalescer of 2 workers over blockingDecide, and a
// check that sends one request and reports its error on errs.
func blockedCoalescer(t *testing.T, overlap time.Duration) (calls chan []algorithms.Request, release chan struct{}, check func(), errs chan error) {
	calls, release, errs = make(chan []algorithms.Request, 8), make(chan struct{}), make(chan error, 8)
	c := newCoalescer(2, 16, overlap, blockingDecide(calls, release))
	t.Cleanup(c.close)
	req := []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: "id"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}, Hits: 1}}
	deadline := time.Now().Add(time.Minute)
	check = func() {
		_, err := c.check(context.Background(), deadline, req)
		errs <- err
	}
	return calls, release, check, errs
}

// TestCoalescerOneCallOut: with two workers, the batches that arrive while
// a call is out wait for it and leave together in one call, not beside it.
func TestCoalescerOneCallOut(t *testing.T) {
	calls, release, check, errs := blockedCoalescer(t, time.Minute)
	go check()
	if got := <-calls; len(got) != 1 {
		t.Fatalf("the first call carries %d requests, want 1", len(got))
	}
	for range 3 {
		go check()
	}
	time.Sleep(100 * time.Millisecond) // the idle worker would have sent by now
	if n := len(calls); n != 0 {
		t.Fatalf("%d calls went out beside the first, want none before it returns", n)
	}
	release <- struct{}{}
	if got := <-calls; len(got) != 3 {
		t.Fatalf("the second call carries %d requests, want the 3 that waited", len(got))
	}
	release <- struct{}{}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("check: %v", err)
		}
	}
}

// TestCoalescerOverlapsASlowCall: a call out for longer than the overlap
// lets the next batch leave beside it.
func TestCoalescerOverlapsASlowCall(t *testing.T) {
	calls, release, check, errs := blockedCoalescer(t, 50*time.Millisecond)
	start := time.Now() // before the first call leaves
	go check()
	<-calls
	go check()
	select {
	case got := <-calls:
		if waited := time.Since(start); len(got) != 1 || waited < 50*time.Millisecond {
			t.Fatalf("the second call (%d requests) left %v after the first, want 1 request once the first was out 50 ms", len(got), waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no second call beside one that is out for 5 s")
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("check: %v", err)
		}
	}
}

// TestCoalescerGathersReadyCallers: batches queued by goroutines that are
// ready to run when a worker takes the first one leave with it, in one
// call, rather than one call each. One P makes the order of goroutines
// plain: the callers are all ready before any runs.
func TestCoalescerGathersReadyCallers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const callers, trials = 8, 20
	var calls atomic.Int32
	c := newCoalescer(1, 64, overlapAfter, func(_ context.Context, reqs []algorithms.Request, _ []int) ([]algorithms.Decision, error) {
		calls.Add(1)
		return make([]algorithms.Decision, len(reqs)), nil
	})
	defer c.close()
	req := []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: "id"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}, Hits: 1}}
	deadline := time.Now().Add(time.Minute)
	var total int32
	for range trials {
		calls.Store(0)
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.check(context.Background(), deadline, req); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		total += calls.Load()
	}
	// Without gather: a call per caller (160), or 37–42 where -race
	// shuffles the order of ready goroutines. With it: 20–22.
	if total > trials*5/4 {
		t.Fatalf("%d calls for %d trials of %d ready callers, want about one a trial", total, trials, callers)
	}
}
