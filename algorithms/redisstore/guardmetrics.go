package redisstore

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// newGuardMetrics makes the guard's metrics, and registers them on reg
// unless it is nil: per master too on a Cluster.
func newGuardMetrics(reg prometheus.Registerer, backendName string, cluster bool) (guardMetrics, error) {
	backend := prometheus.Labels{"backend": backendName}
	m := guardMetrics{
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_backend_errors_total", Help: "Counter backend calls that failed: errors, or timeouts while the backend answered no other call.",
			ConstLabels: backend,
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_degraded_decisions_total", Help: "Decisions made by the failure policy (FAILURE_MODE) instead of the counter backend.",
		}, []string{"mode"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_shed_total", Help: "Checks refused (REST 503, gRPC UNAVAILABLE) because their deadline passed while the backend was answering others: Throttle was overloaded.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_backend_circuit_open", Help: "1 while the counter backend's circuit breaker is open (or probing); on a Redis Cluster, while any master's is.",
			ConstLabels: backend,
		}),
	}
	cs := []prometheus.Collector{m.errors, m.degraded, m.shed, m.open}
	if cluster {
		m.shardOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "throttle_shard_circuit_open", Help: "1 while the circuit breaker of a Redis Cluster master is open (or probing); shard is the master's address, or unassigned for slots no master serves.",
			ConstLabels: backend,
		}, []string{"shard"})
		m.shardErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_shard_errors_total", Help: "Calls to a Redis Cluster master that failed.",
			ConstLabels: backend,
		}, []string{"shard"})
		m.shardDegraded = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_shard_degraded_decisions_total", Help: "Decisions made by the failure policy (FAILURE_MODE) for keys of a Redis Cluster master, by master.",
		}, []string{"shard", "mode"})
		cs = append(cs, m.shardOpen, m.shardErrors, m.shardDegraded)
	}
	if reg != nil {
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return guardMetrics{}, fmt.Errorf("register guard metrics: %w", err)
			}
		}
	}
	return m, nil
}

type guardMetrics struct {
	errors   prometheus.Counter
	degraded *prometheus.CounterVec
	shed     prometheus.Counter
	open     prometheus.Gauge
	// Per master, on a Cluster only.
	shardOpen     *prometheus.GaugeVec
	shardErrors   *prometheus.CounterVec
	shardDegraded *prometheus.CounterVec
}
