package algorithms_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/redistest"
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
			g, err := algorithms.NewGuard(algorithms.NewRedisStore(redistest.NewClient(t, srv.URL()), algorithms.RedisOptions{}),
				algorithms.GuardOptions{Mode: tc.mode, Timeout: 200 * time.Millisecond, Failures: 2, Cooldown: 100 * time.Millisecond, Registerer: reg})
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
				t.Error("circuit not open after consecutive failures")
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
// failure that opens the circuit.
func TestGuardPassesInvalid(t *testing.T) {
	g, err := algorithms.NewGuard(algorithms.NewMemoryStore(algorithms.MemoryOptions{}), algorithms.GuardOptions{Mode: algorithms.FailOpen, Failures: 1})
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
	if _, err := algorithms.NewGuard(nil, algorithms.GuardOptions{Mode: "sideways"}); err == nil {
		t.Error("unknown failure mode accepted")
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
