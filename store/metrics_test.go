package store

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterMetrics(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		if err := db.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		if err := db.RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
		if err := db.RegisterMetrics(reg); err == nil {
			t.Error("registering twice: want an error")
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			m := f.GetMetric()[0]
			if l := m.GetLabel(); len(l) != 1 || l[0].GetValue() != db.Dialect() {
				t.Errorf("%s labels = %v, want dialect=%s", f.GetName(), l, db.Dialect())
			}
			if g := m.GetGauge(); g != nil {
				got[f.GetName()] = g.GetValue()
			} else {
				got[f.GetName()] = m.GetCounter().GetValue()
			}
		}
		for _, name := range []string{
			"throttle_db_max_open_connections", "throttle_db_open_connections", "throttle_db_in_use_connections",
			"throttle_db_idle_connections", "throttle_db_wait_count_total", "throttle_db_wait_duration_seconds_total",
		} {
			if _, ok := got[name]; !ok {
				t.Errorf("metric %s missing; got %v", name, got)
			}
		}
		if got["throttle_db_open_connections"] < 1 {
			t.Errorf("open connections = %v after a ping, want ≥ 1", got["throttle_db_open_connections"])
		}
	})
}
