package store

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers the database's metrics with reg: the
// connection pool's statistics, read at scrape time,
//
//	throttle_db_max_open_connections        gauge
//	throttle_db_open_connections            gauge
//	throttle_db_in_use_connections          gauge
//	throttle_db_idle_connections            gauge
//	throttle_db_wait_count_total            counter
//	throttle_db_wait_duration_seconds_total counter
//
// and throttle_store_unavailable_total{op}, the operations that failed with
// ErrUnavailable (op such as "create_rule", "snapshot", "add_usage").
// Each carries a "dialect" label ("sqlite" or "postgres").
func (db *DB) RegisterMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil // nil: not registered, as everywhere
	}
	for _, c := range []prometheus.Collector{newPoolCollector(db), db.unavailable} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register database metrics: %w", err)
		}
	}
	return nil
}

func newUnavailableCounter(dialect string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "throttle_store_unavailable_total",
		Help:        "Database operations that failed because the database could not serve (unreachable, busy, locked, or no answer in time), by operation.",
		ConstLabels: prometheus.Labels{"dialect": dialect},
	}, []string{"op"})
}

type poolCollector struct {
	db                                      *DB
	maxOpen, open, inUse, idle, waits, wait *prometheus.Desc
}

func newPoolCollector(db *DB) *poolCollector {
	labels := prometheus.Labels{"dialect": db.dialect}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("throttle_db_"+name, help, nil, labels)
	}
	return &poolCollector{
		db:      db,
		maxOpen: desc("max_open_connections", "Maximum number of open connections to the database."),
		open:    desc("open_connections", "Established connections to the database, in use and idle."),
		inUse:   desc("in_use_connections", "Connections to the database currently in use."),
		idle:    desc("idle_connections", "Idle connections to the database."),
		waits:   desc("wait_count_total", "Times a query waited for a free database connection."),
		wait:    desc("wait_duration_seconds_total", "Total time spent waiting for a free database connection."),
	}
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.maxOpen, p.open, p.inUse, p.idle, p.waits, p.wait} {
		ch <- d
	}
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.db.sql.Stats()
	send := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
		m, err := prometheus.NewConstMetric(d, t, v)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	send(p.maxOpen, prometheus.GaugeValue, float64(s.MaxOpenConnections))
	send(p.open, prometheus.GaugeValue, float64(s.OpenConnections))
	send(p.inUse, prometheus.GaugeValue, float64(s.InUse))
	send(p.idle, prometheus.GaugeValue, float64(s.Idle))
	send(p.waits, prometheus.CounterValue, float64(s.WaitCount))
	send(p.wait, prometheus.CounterValue, s.WaitDuration.Seconds())
}

// cacheMetrics are the Cache's loads from the database:
//
//	throttle_cache_loads_total{kind}   kind "full" (every row) or "changes" (the changed clients' rows)
//	throttle_cache_rows_loaded_total   clients, rules, exemptions and overrides read by those loads
type cacheMetrics struct {
	loads *prometheus.CounterVec
	rows  prometheus.Counter
}

func newCacheMetrics() cacheMetrics {
	return cacheMetrics{
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_cache_loads_total",
			Help: "Loads of the cache of clients, rules and exemptions from the database: full (every row: at start, or too far behind) or changes (the rows of the clients changed since).",
		}, []string{"kind"}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_cache_rows_loaded_total",
			Help: "Rows (clients, rules, exemptions, overrides, API keys) the cache read from the database.",
		}),
	}
}

// loaded counts a load of kind that read s.
func (m cacheMetrics) loaded(kind string, s Snapshot) {
	m.loads.WithLabelValues(kind).Inc()
	m.rows.Add(float64(rows(s)))
}

// RegisterMetrics registers the cache's metrics (cacheMetrics) with reg.
func (c *Cache) RegisterMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, col := range []prometheus.Collector{c.metrics.loads, c.metrics.rows} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("register cache metrics: %w", err)
		}
	}
	return nil
}
