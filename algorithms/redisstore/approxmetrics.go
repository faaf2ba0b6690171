package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// approxMetrics are the approximate limits' metrics.
type approxMetrics struct {
	batches   *prometheus.CounterVec // by result: ok, error
	latency   prometheus.Histogram
	decisions *prometheus.CounterVec // by accuracy: exact, approximate
	// exact and approximate are decisions' two counters, askCounters the
	// asks', resolved once: a label lookup costs more than an approximate
	// decision.
	exact, approximate prometheus.Counter
	askCounters        approxAskCounters
	overflow           prometheus.Counter
	asks               *prometheus.CounterVec // by result: granted, exhausted, error
	// table is the store's table of approximate limits; tables reads it at
	// scrape time, with those of the other stores it is registered with.
	table  *approxTable
	tables *approxTableMetrics
}

// The prefixes of the approximate limits' metrics: a regional store's
// (REDIS_URL, REDIS_PERSECOND_URL), and the global Redis's
// (GLOBAL_REDIS_URL, Options.Global), whose limits are those of scope
// global.
const (
	approxMetricPrefix = "throttle_approximate_"
	globalMetricPrefix = "throttle_global_"
)

// newApproxMetrics makes the metrics of t, named after prefix
// (approxMetricPrefix or globalMetricPrefix).
func newApproxMetrics(t *approxTable, prefix string) *approxMetrics {
	name := func(s string) string { return prefix + strings.TrimPrefix(s, approxMetricPrefix) }
	help := func(s string) string {
		if prefix == globalMetricPrefix {
			s = strings.ReplaceAll(s, "approximate limits", "global limits (scope global, in the global Redis)")
		}
		return s
	}
	m := &approxMetrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("throttle_approximate_sync_batches_total"),
			Help: help("Sync calls of approximate limits to Redis (one per master and round, per 512 counters), by result."),
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    name("throttle_approximate_sync_seconds"),
			Help:    help("How long a sync call of approximate limits took, answered or not."),
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .15, .25, .5, 1, 2},
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_redis_decisions_total",
			Help: "Decisions of the Redis store (every API), by the accuracy of their limit: exact (Redis decided) or approximate (decided from memory).",
		}, []string{"accuracy"}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("throttle_approximate_overflow_total"),
			Help: help("Approximate requests decided exactly (through Redis) because the table of approximate limits was full."),
		}),
		asks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("throttle_approximate_asks_total"),
			Help: help("Asks of approximate limits: a replica whose lease of a window was spent asked Redis for more at once, by result: granted, exhausted (Redis had less left than the request needed) or error (no answer: decided from memory)."),
		}, []string{"result"}),
		table:  t,
		tables: newApproxTableMetrics(name, help),
	}
	m.resolve()
	t.asks = &m.askCounters
	return m
}

// approxTableMetrics read, at scrape time, the tables of approximate limits
// of the stores registered on one registry with one prefix: the regional
// stores of a process (REDIS_URL and REDIS_PERSECOND) share one, whose
// counts are the sums over their tables, whose round trip is the slowest
// and whose replicas the largest count; the global store's is its own.
type approxTableMetrics struct {
	roundTrip, pending, leased, limits, replicas *prometheus.Desc // gauges
	blindHits, excessHits, droppedHits           *prometheus.Desc // counters
	mu                                           sync.Mutex
	tables                                       []*approxTable
}

// newApproxTableMetrics describes the metrics of approximate limits' tables,
// with newApproxMetrics's name and help; they read no table until one joins.
func newApproxTableMetrics(name, help func(string) string) *approxTableMetrics {
	desc := func(n, h string) *prometheus.Desc { return prometheus.NewDesc(name(n), help(h), nil, nil) }
	return &approxTableMetrics{
		roundTrip: desc("throttle_approximate_round_trip_seconds",
			"The round trip to Redis of approximate limits' syncs, a moving average of their answered calls (of the slowest Redis this replica syncs them with): leases cover this replica's demand over two intervals and two round trips, and a call times out after at least four."),
		pending: desc("throttle_approximate_pending_hits",
			"Hits of approximate limits admitted here and not yet in Redis (pending and in flight)."),
		leased: desc("throttle_approximate_leased_hits",
			"Hits of approximate limits this replica holds leased from Redis and has not spent (Redis counts them as taken until they are spent or go back)."),
		limits: desc("throttle_approximate_limits",
			"Approximate limits (a limit on an identifier) this replica holds."),
		replicas: desc("throttle_approximate_replicas",
			"Replicas deciding approximate limits, as the registry in Redis last said (the largest count where several Redis keep one): leases and blind budgets divide what is left by it. 0 until the count has settled, an interval after this replica joined the registry (before it reads the registry, approximate limits are decided exactly; then, until it settles, a window has no blind budget)."),
		blindHits: desc("throttle_approximate_blind_hits_total",
			"Hits of approximate limits admitted here outside any lease: within a window's blind budget, or by the failure policy when Redis gave no answer in time. The most by which approximate limits can have gone over their limit (the error bound, as it is spent)."),
		excessHits: desc("throttle_approximate_excess_hits_total",
			"Hits past an approximate limit that Redis saw when this replica reported them (a window's count over its limit, by what each report added): the error observed, against the bound of throttle_approximate_blind_hits_total."),
		droppedHits: desc("throttle_approximate_dropped_hits_total",
			"Hits of approximate limits given up: Redis could not be told before their window was over."),
	}
}

// join adds t to the tables m reads, once.
func (m *approxTableMetrics) join(t *approxTable) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.tables, t) {
		m.tables = append(m.tables, t)
	}
}

// Describe is prometheus.Collector's.
func (m *approxTableMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.roundTrip, m.pending, m.leased, m.limits, m.replicas, m.blindHits, m.excessHits, m.droppedHits} {
		ch <- d
	}
}

// Collect is prometheus.Collector's: it reads the tables now.
func (m *approxTableMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	tables := slices.Clone(m.tables)
	m.mu.Unlock()
	var roundTrip time.Duration
	var pending, leased, replicas, blindHits, excessHits, droppedHits int64
	limits := 0
	for _, t := range tables {
		roundTrip = max(roundTrip, t.roundTrip())
		pending += t.unsent()
		leased += t.leased()
		limits += t.size()
		if t.settled.Load() {
			replicas = max(replicas, t.replicas.Load())
		}
		blindHits += t.blindHits.Load()
		excessHits += t.excess.Load()
		droppedHits += t.dropped.Load()
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(m.roundTrip, roundTrip.Seconds())
	gauge(m.pending, float64(pending))
	gauge(m.leased, float64(leased))
	gauge(m.limits, float64(limits))
	gauge(m.replicas, float64(replicas))
	counter(m.blindHits, blindHits)
	counter(m.excessHits, excessHits)
	counter(m.droppedHits, droppedHits)
}

// resolve resolves the labels of the counters used on every decision
// or ask.
func (m *approxMetrics) resolve() {
	m.exact = m.decisions.WithLabelValues("exact")
	m.approximate = m.decisions.WithLabelValues("approximate")
	m.askCounters = approxAskCounters{m.asks.WithLabelValues("granted"), m.asks.WithLabelValues("exhausted"), m.asks.WithLabelValues("error")}
}

// observe notes one sync call.
func (m *approxMetrics) observe(d time.Duration, err error) {
	m.latency.Observe(d.Seconds())
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.batches.WithLabelValues(result).Inc()
}

// register registers every metric on reg. A second store of the process
// (the per-second Redis, REDIS_PERSECOND) adds to the first's counters,
// and its table joins the first's in the metrics read from the tables.
func (m *approxMetrics) register(reg prometheus.Registerer) error {
	var errs [6]error
	m.batches, errs[0] = register(reg, m.batches)
	m.latency, errs[1] = register(reg, m.latency)
	m.decisions, errs[2] = register(reg, m.decisions)
	m.overflow, errs[3] = register(reg, m.overflow)
	m.asks, errs[4] = register(reg, m.asks)
	m.tables, errs[5] = register(reg, m.tables)
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("register approximate metrics: %w", err)
	}
	m.resolve() // (the table's asks point at askCounters, updated in place)
	m.tables.join(m.table)
	return nil
}
