package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// approxMetrics are the approximate limits' metrics.
type approxMetrics struct {
	batches   *prometheus.CounterVec // by result: ok, error
	latency   prometheus.Histogram
	decisions *prometheus.CounterVec // by accuracy: exact, approximate
	// exact and approximate are decisions' two counters, resolved once:
	// a label lookup costs more than an approximate decision.
	exact, approximate prometheus.Counter
	overflow           prometheus.Counter
	// funcs read the table at scrape time.
	funcs []prometheus.Collector
}

func newApproxMetrics(t *approxTable) *approxMetrics {
	m := &approxMetrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_approximate_sync_batches_total",
			Help: "Sync calls of approximate limits to Redis (one per master and round, per 512 counters), by result.",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "throttle_approximate_sync_seconds",
			Help:    "How long a sync call of approximate limits took, answered or not.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_redis_decisions_total",
			Help: "Decisions of the Redis store (every API), by the accuracy of their limit: exact (Redis decided) or approximate (decided from memory).",
		}, []string{"accuracy"}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_approximate_overflow_total",
			Help: "Approximate requests decided exactly (through Redis) because the table of approximate limits was full.",
		}),
		funcs: []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "throttle_approximate_pending_hits",
				Help: "Hits of approximate limits admitted here and not yet in Redis (pending and in flight).",
			}, func() float64 { return float64(t.unsent()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "throttle_approximate_limits",
				Help: "Approximate limits (a limit on an identifier) this replica holds.",
			}, func() float64 { return float64(t.size()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "throttle_approximate_replicas",
				Help: "Replicas deciding approximate limits, as the registry in Redis last said: the shares of what is left divide by it.",
			}, func() float64 { return float64(t.n()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "throttle_approximate_dropped_hits_total",
				Help: "Hits of approximate limits given up: Redis could not be told before their window was over.",
			}, func() float64 { return float64(t.dropped.Load()) }),
		},
	}
	m.exact = m.decisions.WithLabelValues("exact")
	m.approximate = m.decisions.WithLabelValues("approximate")
	return m
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
	var errs [4]error
	m.batches, errs[0] = register(reg, m.batches)
	m.latency, errs[1] = register(reg, m.latency)
	m.decisions, errs[2] = register(reg, m.decisions)
	m.overflow, errs[3] = register(reg, m.overflow)
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("register approximate metrics: %w", err)
	}
	m.exact = m.decisions.WithLabelValues("exact")
	m.approximate = m.decisions.WithLabelValues("approximate")
	for _, c := range m.funcs {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			return fmt.Errorf("register approximate metrics: %w", err)
		}
	}
	return nil
}
