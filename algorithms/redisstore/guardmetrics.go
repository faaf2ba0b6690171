package redisstore

import (
	"errors"
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
	}
	if reg == nil {
		return m, nil
	}
	// A second guard of the process (the per-second Redis, another
	// backend name) has series of its own where the metric names its
	// backend, and adds to the first's elsewhere.
	var errs [7]error
	m.errors, errs[0] = register(reg, m.errors)
	m.degraded, errs[1] = register(reg, m.degraded)
	m.shed, errs[2] = register(reg, m.shed)
	m.open, errs[3] = register(reg, m.open)
	if cluster {
		m.shardOpen, errs[4] = register(reg, m.shardOpen)
		m.shardErrors, errs[5] = register(reg, m.shardErrors)
		m.shardDegraded, errs[6] = register(reg, m.shardDegraded)
	}
	if err := errors.Join(errs[:]...); err != nil {
		return guardMetrics{}, fmt.Errorf("register guard metrics: %w", err)
	}
	return m, nil
}

// register registers c on reg and returns the collector registered: c, or
// one of the same type registered before it with the same name and labels,
// whose series c's would have been.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
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
