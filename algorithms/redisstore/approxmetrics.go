package redisstore

import (
	"errors"
	"fmt"
	"strings"
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
	// funcs read the table at scrape time.
	funcs []prometheus.Collector
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
		funcs: []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name("throttle_approximate_round_trip_seconds"),
				Help: help("The round trip to Redis of approximate limits' syncs, a moving average of their answered calls: leases cover this replica's demand over two intervals and two round trips, and a call times out after at least four."),
			}, func() float64 { return t.roundTrip().Seconds() }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name("throttle_approximate_pending_hits"),
				Help: help("Hits of approximate limits admitted here and not yet in Redis (pending and in flight)."),
			}, func() float64 { return float64(t.unsent()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name("throttle_approximate_leased_hits"),
				Help: help("Hits of approximate limits this replica holds leased from Redis and has not spent (Redis counts them as taken until they are spent or go back)."),
			}, func() float64 { return float64(t.leased()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name("throttle_approximate_limits"),
				Help: help("Approximate limits (a limit on an identifier) this replica holds."),
			}, func() float64 { return float64(t.size()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name("throttle_approximate_replicas"),
				Help: help("Replicas deciding approximate limits, as the registry in Redis last said: leases and blind budgets divide what is left by it. 0 until the count has settled, an interval after this replica joined the registry (before it reads the registry, approximate limits are decided exactly; then, until it settles, a window has no blind budget)."),
			}, func() float64 {
				if !t.settled.Load() {
					return 0
				}
				return float64(t.replicas.Load())
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: name("throttle_approximate_blind_hits_total"),
				Help: help("Hits of approximate limits admitted here outside any lease: within a window's blind budget, or by the failure policy when Redis gave no answer in time. The most by which approximate limits can have gone over their limit (the error bound, as it is spent)."),
			}, func() float64 { return float64(t.blindHits.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: name("throttle_approximate_excess_hits_total"),
				Help: help("Hits past an approximate limit that Redis saw when this replica reported them (a window's count over its limit, by what each report added): the error observed, against the bound of throttle_approximate_blind_hits_total."),
			}, func() float64 { return float64(t.excess.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: name("throttle_approximate_dropped_hits_total"),
				Help: help("Hits of approximate limits given up: Redis could not be told before their window was over."),
			}, func() float64 { return float64(t.dropped.Load()) }),
		},
	}
	m.resolve()
	t.asks = &m.askCounters
	return m
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
// (the per-second Redis, REDIS_PERSECOND) adds to the first's counters;
// the gauges, which read one table, stay the first store's.
func (m *approxMetrics) register(reg prometheus.Registerer) error {
	var errs [5]error
	m.batches, errs[0] = register(reg, m.batches)
	m.latency, errs[1] = register(reg, m.latency)
	m.decisions, errs[2] = register(reg, m.decisions)
	m.overflow, errs[3] = register(reg, m.overflow)
	m.asks, errs[4] = register(reg, m.asks)
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("register approximate metrics: %w", err)
	}
	m.resolve() // (the table's asks point at askCounters, updated in place)
	for _, c := range m.funcs {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			return fmt.Errorf("register approximate metrics: %w", err)
		}
	}
	return nil
}
