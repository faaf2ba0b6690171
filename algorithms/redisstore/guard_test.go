package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// TestGuardFailureModes stops Redis in the middle of each test and starts it
// again: the guard answers by its mode while Redis is gone, opens its
// circuit, and goes back to Redis by itself.
func TestGuardFailureModes(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
	cases := []struct {
		mode        algorithms.FailureMode
		wantAllowed []bool // three requests while Redis is down
	}{
		{algorithms.FailOpen, []bool{true, true, true}},
		{algorithms.FailClosed, []bool{false, false, false}},
		{algorithms.FailLocal, []bool{true, true, false}},
	}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			srv := redistest.Start(t)
			reg := prometheus.NewRegistry()
			g, err := redisstore.NewGuard(redisstore.New(redistest.NewClient(t, srv.URL()), redisstore.Options{}),
				redisstore.GuardOptions{Mode: tc.mode, Timeout: 200 * time.Millisecond, BreakerMinCalls: 2, OpenFor: 100 * time.Millisecond, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			check := func(id string) algorithms.Decision {
				t.Helper()
				ds, err := g.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: "guard", Identifier: id}, Limit: limit, Hits: 1}})
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return ds[0]
			}

			if d := check("before"); !d.Allowed || d.Degraded || d.Remaining != 1 {
				t.Fatalf("with Redis up: %+v, want allowed, not degraded, 1 remaining", d)
			}

			srv.Stop()
			for i, want := range tc.wantAllowed {
				d := check("during")
				if d.Allowed != want || !d.Degraded {
					t.Errorf("Redis down, request %d: allowed=%v degraded=%v, want allowed=%v degraded=true", i, d.Allowed, d.Degraded, want)
				}
			}
			if !g.Degraded() {
				t.Error("circuit not open after 3 failures of 4 calls")
			}
			if got := metricValue(t, reg, "throttle_backend_circuit_open"); got != 1 {
				t.Errorf("throttle_backend_circuit_open = %v, want 1", got)
			}
			if got := metricValue(t, reg, "throttle_degraded_decisions_total"); got != 3 {
				t.Errorf("throttle_degraded_decisions_total = %v, want 3", got)
			}
			// While open, the guard does not wait on the dead backend.
			startOpen := time.Now()
			check("during")
			if g.Degraded() && time.Since(startOpen) > 150*time.Millisecond {
				t.Errorf("an open circuit still waited %v on Redis", time.Since(startOpen))
			}

			srv.Restart()
			deadline := time.Now().Add(5 * time.Second)
			for {
				d := check("after")
				if !d.Degraded {
					if !d.Allowed || d.Remaining != 1 {
						t.Errorf("after recovery: %+v, want allowed with 1 remaining (fresh Redis)", d)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("guard did not go back to Redis within 5s of its return")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if g.Degraded() {
				t.Error("circuit still open after recovery")
			}
			if got := metricValue(t, reg, "throttle_backend_circuit_open"); got != 0 {
				t.Errorf("throttle_backend_circuit_open = %v after recovery, want 0", got)
			}
		})
	}
}

// TestGuardPassesInvalid: a client's bad limit is an error, not a backend
// failure that opens the circuit, and is refused before Redis (here a closed
// port) is tried.
func TestGuardPassesInvalid(t *testing.T) {
	st := redisstore.New(redistest.NewClient(t, "redis://127.0.0.1:1/0"), redisstore.Options{})
	g, err := redisstore.NewGuard(st, redisstore.GuardOptions{Mode: algorithms.FailOpen, BreakerMinCalls: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Check(context.Background(), []algorithms.Request{{Key: algorithms.Key{Scope: "s", Identifier: "i"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow}, Hits: 1}})
	if err == nil {
		t.Fatal("invalid limit accepted")
	}
	if g.Degraded() {
		t.Error("an invalid request opened the circuit")
	}
	if _, err := redisstore.NewGuard(nil, redisstore.GuardOptions{Mode: "sideways"}); err == nil {
		t.Error("unknown failure mode accepted")
	}
}

// guarded returns a guard over a Redis store on srv, and its registry.
func guarded(t *testing.T, srv *redistest.Server, ro redisstore.Options, o redisstore.GuardOptions) (*redisstore.Guard, *prometheus.Registry) {
	t.Helper()
	st := redisstore.New(redistest.NewClient(t, srv.URL()), ro)
	t.Cleanup(st.Close)
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	if o.Mode == "" {
		o.Mode = algorithms.FailOpen
	}
	g, err := redisstore.NewGuard(st, o)
	if err != nil {
		t.Fatal(err)
	}
	return g, reg
}

func oneRequest(id string, limit int64) []algorithms.Request {
	return []algorithms.Request{{
		Key:   algorithms.Key{Scope: "guard", Identifier: id},
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: limit, Window: time.Hour}, Hits: 1,
	}}
}

// TestGuardOpensOnFailureRatio: the breaker opens on the failure ratio over
// a minimum number of calls in its window, not on a few failures in a row.
func TestGuardOpensOnFailureRatio(t *testing.T) {
	srv := redistest.Start(t)
	g, reg := guarded(t, srv, redisstore.Options{}, redisstore.GuardOptions{
		Timeout: 200 * time.Millisecond, BreakerMinCalls: 10, BreakerRatio: 0.5, BreakerWindow: time.Minute, OpenFor: time.Minute,
	})
	ctx := context.Background()
	for i := range 6 {
		if ds, err := g.Check(ctx, oneRequest("ratio", 1000)); err != nil || ds[0].Degraded {
			t.Fatalf("call %d with Redis up: %+v %v", i, ds, err)
		}
	}
	srv.Stop()
	for i := range 5 {
		ds, err := g.Check(ctx, oneRequest("ratio", 1000))
		if err != nil || !ds[0].Degraded || !ds[0].Allowed {
			t.Fatalf("failure %d: %+v %v, want a degraded allowed decision (FAILURE_MODE open)", i, ds, err)
		}
		// 5 failures of 11 calls: under the ratio, still closed.
		if g.Degraded() {
			t.Fatalf("circuit open after %d failures of %d calls, want closed below half", i+1, i+7)
		}
	}
	if _, err := g.Check(ctx, oneRequest("ratio", 1000)); err != nil {
		t.Fatal(err)
	}
	if !g.Degraded() {
		t.Fatal("circuit closed after 6 failures of 12 calls, want open")
	}
	if got := metricValue(t, reg, "throttle_backend_errors_total"); got != 6 {
		t.Errorf("throttle_backend_errors_total = %v, want 6", got)
	}
	// Open: answered by the policy without a backend call.
	if ds, err := g.Check(ctx, oneRequest("ratio", 1000)); err != nil || !ds[0].Degraded {
		t.Fatalf("with the circuit open: %+v %v", ds, err)
	}
	if got := metricValue(t, reg, "throttle_backend_errors_total"); got != 6 {
		t.Errorf("an open circuit still called the backend: errors = %v, want 6", got)
	}
}

// TestGuardOverloadIsNotAnOutage: far more concurrent checks than one
// Redis connection can serve within their budget. The ones that miss it are
// refused with ErrOverloaded, none is decided by the failure policy, the
// circuit stays closed, and no more than the limit is admitted.
func TestGuardOverloadIsNotAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	// One worker sending one check at a time: Throttle's own queue is the
	// bottleneck, Redis answers every call it gets. A budget that one call
	// meets easily, but not the 400th in the queue.
	g, reg := guarded(t, srv, redisstore.Options{Coalesce: 1, MaxBatch: 1}, redisstore.GuardOptions{
		Timeout: 10 * time.Millisecond, BreakerMinCalls: 5,
	})
	const limit, callers, perCaller = 300, 400, 5
	// The engine is loaded (FUNCTION LOAD) and the connection up, as on a
	// running server: warmed with a budget no busy machine misses.
	warm, _ := guarded(t, srv, redisstore.Options{}, redisstore.GuardOptions{Timeout: 10 * time.Second})
	if ds, err := warm.Check(context.Background(), oneRequest("overload-warm", 1)); err != nil || ds[0].Degraded {
		t.Fatalf("warm-up: %+v %v", ds, err)
	}
	for range 3 { // a call that dials may miss the budget on a busy machine
		if ds, err := g.Check(context.Background(), oneRequest("overload-warm-2", 1)); err == nil && !ds[0].Degraded {
			break
		}
	}
	var mu sync.Mutex
	var allowed, rejected, overloaded, degraded int
	var other []error
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perCaller {
				ds, err := g.Check(context.Background(), oneRequest("overload", limit))
				mu.Lock()
				switch {
				case errors.Is(err, algorithms.ErrOverloaded):
					overloaded++
				case err != nil:
					other = append(other, err)
				case ds[0].Degraded:
					degraded++
				case ds[0].Allowed:
					allowed++
				default:
					rejected++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("allowed %d, rejected %d, overloaded %d, degraded %d", allowed, rejected, overloaded, degraded)
	if len(other) > 0 {
		t.Fatalf("%d checks failed otherwise, first: %v", len(other), other[0])
	}
	if degraded != 0 {
		t.Errorf("%d decisions by the failure policy while Redis answered, want 0", degraded)
	}
	if overloaded == 0 {
		t.Error("no check was refused as overloaded: the test did not overload the guard")
	}
	if allowed > limit {
		t.Errorf("admitted %d, more than the limit %d", allowed, limit)
	}
	if g.Degraded() {
		t.Error("circuit opened under overload with Redis up")
	}
	if got := metricValue(t, reg, "throttle_backend_errors_total"); got != 0 {
		t.Errorf("throttle_backend_errors_total = %v under overload, want 0", got)
	}
	if got := metricValue(t, reg, "throttle_shed_total"); got != float64(overloaded) {
		t.Errorf("throttle_shed_total = %v, want %d", got, overloaded)
	}
}

// TestGuardCircuitCannotStick reproduces the stuck-open circuit of issue 8:
// Redis stops answering (CLIENT PAUSE: calls time out, nothing succeeds),
// the circuit opens; a probe times out too; then Redis answers again and no
// traffic comes. Before, the circuit stayed open until some request probed
// it (and a probe that failed under load kept it open). Now Run probes it
// and it closes within 2s of Redis being healthy.
func TestGuardCircuitCannotStick(t *testing.T) {
	srv := redistest.Start(t)
	g, reg := guarded(t, srv, redisstore.Options{Coalesce: 4}, redisstore.GuardOptions{
		DefaultTimeout: 50 * time.Millisecond, BreakerMinCalls: 4, OpenFor: 200 * time.Millisecond, HungAfter: 100 * time.Millisecond,
	})
	ctx, stop := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	admin := redistest.NewClient(t, srv.URL())
	pause := func(d time.Duration) {
		t.Helper()
		if err := admin.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
	}
	pause(1500 * time.Millisecond)
	paused := time.Now()
	// Until calls have waited HungAfter (100 ms) unanswered, a timeout is
	// not Redis's failure (the first calls after idle): overloaded. Then
	// each is, and 4 open the circuit.
	degraded := 0
	for i := 0; degraded < 4; i++ {
		ds, err := g.Check(context.Background(), oneRequest("stuck", 10))
		switch {
		case err == nil && ds[0].Degraded:
			degraded++
		case errors.Is(err, algorithms.ErrOverloaded) && time.Since(paused) < 300*time.Millisecond:
			// the wait has just begun: not hung yet
		default:
			t.Fatalf("call %d with Redis paused %v: %+v %v, want overloaded before HungAfter, then degraded", i, time.Since(paused), ds, err)
		}
	}
	if !g.Degraded() {
		t.Fatal("circuit not open after 4 failed calls")
	}
	// Probes go (Run's PINGs, every ~200ms) and time out while Redis is
	// paused: each one ends and the circuit stays open.
	time.Sleep(700 * time.Millisecond)
	if !g.Degraded() {
		t.Fatal("circuit closed while Redis was still paused")
	}
	if got := metricValue(t, reg, "throttle_backend_errors_total"); got < 5 {
		t.Errorf("throttle_backend_errors_total = %v, want the 4 calls and at least one timed-out probe", got)
	}
	healthy := paused.Add(1500 * time.Millisecond)
	for g.Degraded() {
		if time.Since(healthy) > 2*time.Second {
			t.Fatalf("circuit still open %v after Redis answered again, with no traffic", time.Since(healthy))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("circuit closed %v after the pause ended", time.Since(healthy))
	if got := metricValue(t, reg, "throttle_backend_circuit_open"); got != 0 {
		t.Errorf("throttle_backend_circuit_open = %v after recovery, want 0", got)
	}
	ds, err := g.Check(context.Background(), oneRequest("stuck", 10))
	if err != nil || ds[0].Degraded || !ds[0].Allowed {
		t.Fatalf("after recovery: %+v %v, want a decision from Redis", ds, err)
	}
}

// TestGuardAnswersBeforeTheCallersDeadline: with Redis hung, a call with a
// deadline of its own (Envoy's grpc-timeout) is answered by policy before
// that deadline, leaving the margin.
func TestGuardAnswersBeforeTheCallersDeadline(t *testing.T) {
	srv := redistest.Start(t)
	// Hung once calls have waited 50 ms unanswered (less than the first
	// caller's budget: its own call proves it).
	g, _ := guarded(t, srv, redisstore.Options{}, redisstore.GuardOptions{Mode: algorithms.FailClosed, BreakerMinCalls: 100, HungAfter: 50 * time.Millisecond})
	admin := redistest.NewClient(t, srv.URL())
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 2000, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	// Deadlines with a margin (a fifth) that a busy machine still meets.
	for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		ds, err := g.Check(ctx, oneRequest("deadline", 10))
		late := ctx.Err()
		cancel()
		if err != nil || !ds[0].Degraded || ds[0].Allowed {
			t.Errorf("deadline %v: %+v %v, want a degraded rejection (FAILURE_MODE closed)", d, ds, err)
		}
		if late != nil {
			t.Errorf("deadline %v: answered after the caller's deadline", d)
		}
	}
	if m := redisstore.DeadlineMargin(20 * time.Millisecond); m != 4*time.Millisecond {
		t.Errorf("margin of 20ms = %v, want 4ms", m)
	}
	// A caller whose deadline leaves no time is told so, not guessed for.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := g.Check(ctx, oneRequest("deadline", 10)); !errors.Is(err, algorithms.ErrOverloaded) {
		t.Errorf("1ms deadline: %v, want ErrOverloaded", err)
	}
}

// metricValue sums the values of a registered metric family.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestGuardIdleIsNotHung: a master that answered nothing for a while only
// because nothing was asked (a replica idle for longer than HungAfter) is
// not hung: the first call after the idle time that misses its budget (here
// Redis paused for a moment; in CI, a starved CPU) is Throttle's overload,
// not a failure decided by the failure policy; once calls have waited
// HungAfter unanswered, they are.
func TestGuardIdleIsNotHung(t *testing.T) {
	srv := redistest.Start(t)
	g, reg := guarded(t, srv, redisstore.Options{}, redisstore.GuardOptions{
		Timeout: 20 * time.Millisecond, HungAfter: 200 * time.Millisecond, BreakerMinCalls: 1,
	})
	warm, _ := guarded(t, srv, redisstore.Options{}, redisstore.GuardOptions{Timeout: 10 * time.Second})
	if _, err := warm.Check(context.Background(), oneRequest("idle-warm", 10)); err != nil {
		t.Fatal(err)
	}
	for range 3 { // connected and the engine loaded
		if ds, err := g.Check(context.Background(), oneRequest("idle", 10)); err == nil && !ds[0].Degraded {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // idle for more than HungAfter
	admin := redistest.NewClient(t, srv.URL())
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 80, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	ds, err := g.Check(context.Background(), oneRequest("idle", 10))
	if !errors.Is(err, algorithms.ErrOverloaded) {
		t.Fatalf("first call after idle, Redis slow for 80 ms: %+v %v, want ErrOverloaded (not hung)", ds, err)
	}
	if got := metricValue(t, reg, "throttle_degraded_decisions_total"); got != 0 {
		t.Errorf("throttle_degraded_decisions_total = %v, want 0", got)
	}
	if g.Degraded() {
		t.Error("circuit opened by the first slow call after idle")
	}
	// Hung: calls wait 300 ms unanswered (more than HungAfter).
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 600, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now()
	for time.Since(paused) < 300*time.Millisecond {
		g.Check(context.Background(), oneRequest("idle", 10))
	}
	ds, err = g.Check(context.Background(), oneRequest("idle", 10))
	if err != nil || !ds[0].Degraded {
		t.Errorf("calls unanswered for 300 ms (HungAfter 200 ms): %+v %v, want a degraded decision", ds, err)
	}
}
