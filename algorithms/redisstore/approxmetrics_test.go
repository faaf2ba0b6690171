package redisstore

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// TestApproximateMetricsOfTwoStores: the main and the per-second store
// (REDIS_PERSECOND) register on one registry, and the metrics that read
// their tables of approximate limits read both: counts summed, the round
// trip the slower one's, the replicas the larger count; a global store's
// throttle_global_* are its own. The held quota of holds sums all three.
func TestApproximateMetricsOfTwoStores(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := storetest.NewClock(t0)
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 3840, Window: time.Hour, Accuracy: algorithms.Approximate}
	for _, side := range []struct {
		db        int
		global    bool
		replicas  int64
		roundTrip time.Duration
		hits      map[string]int // by identifier
		held      int64          // hits its holds hold, as its sweeper read them
	}{
		{db: mainDB, replicas: 2, roundTrip: 3 * time.Millisecond, hits: map[string]int{"a": 7}, held: 5},
		{db: perSecondDB, replicas: 3, roundTrip: 5 * time.Millisecond, hits: map[string]int{"b": 4, "c": 2}, held: 7},
		{db: globalDB, global: true, replicas: 4, roundTrip: 150 * time.Millisecond, hits: map[string]int{"d": 1}, held: 11},
	} {
		// No Check: the syncer never starts, the tables hold what the test
		// decides in them.
		s := New(newDBClient(t, side.db), Options{Now: clock.Now, Global: side.global, ApproximateInterval: time.Hour, HoldSweepEvery: -1})
		t.Cleanup(s.Close)
		if err := s.RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
		s.holdMetrics.held.Store(side.held)
		s.approx.replicas.Store(side.replicas) // blind budgets of 3840 / (128 × replicas) ≥ 10
		s.approx.settled.Store(true)
		s.approx.noteRoundTrip(side.roundTrip)
		for id, n := range side.hits {
			r := algorithms.Request{Key: algorithms.Key{Scope: "s", Identifier: id}, Limit: l, Hits: 1}
			var d algorithms.Decision
			for range n {
				decideLocal(s.approx, &r, &d)
				if !d.Allowed {
					t.Fatalf("hit of %s refused within its blind budget: %+v", id, d)
				}
			}
		}
	}
	got := gauges(t, reg)
	for name, want := range map[string]float64{
		"throttle_approximate_pending_hits":       13,
		"throttle_approximate_blind_hits_total":   13,
		"throttle_approximate_limits":             3,
		"throttle_approximate_leased_hits":        0,
		"throttle_approximate_excess_hits_total":  0,
		"throttle_approximate_dropped_hits_total": 0,
		"throttle_approximate_replicas":           3,
		"throttle_approximate_round_trip_seconds": 0.005,
		"throttle_global_pending_hits":            1,
		"throttle_global_blind_hits_total":        1,
		"throttle_global_limits":                  1,
		"throttle_global_replicas":                4,
		"throttle_global_round_trip_seconds":      0.15,
		"throttle_reservations_held_hits":         23, // every store's holds
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// gauges returns the value of each gauge and counter of reg with one
// series.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if ms := mf.GetMetric(); len(ms) == 1 {
			out[mf.GetName()] = ms[0].GetGauge().GetValue() + ms[0].GetCounter().GetValue()
		}
	}
	return out
}
