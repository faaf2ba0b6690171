package ratelimitsvc

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/refstats"
)

// BenchmarkObserve: what counting one descriptor decision costs, the
// reference's stats off and on (a sink is reached only at a flush, so any
// sink costs the same here).
func BenchmarkObserve(b *testing.B) {
	p, err := refstats.NewPrometheusSink(refstats.DefaultMapping(false))
	if err != nil {
		b.Fatal(err)
	}
	st := refstats.New(p, refstats.Options{})
	b.Cleanup(func() { _ = st.Close(context.Background()) })
	for _, tt := range []struct {
		name string
		ref  ReferenceStats
	}{{"off", nil}, {"on", st}} {
		b.Run(tt.name, func(b *testing.B) {
			m, err := newMetrics(prometheus.NewRegistry(), 1000, tt.ref)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				m.observe("edge", "generic_key_api", "generic_key_api", 1, within, false, false)
			}
		})
	}
}
