package restapi

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the REST API's Prometheus metrics.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	decisions *prometheus.CounterVec
	// reservations counts reservations by outcome: made, committed,
	// cancelled, and the settles refused (already_settled, expired,
	// not_found).
	reservations *prometheus.CounterVec
}

// newMetrics makes the metrics and registers them on reg (when not nil). A
// metric already registered by an earlier handler on the same registry is
// shared rather than refused.
func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_http_requests_total",
			Help: "HTTP requests served by the REST API, by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "throttle_http_request_duration_seconds",
			Help:    "Time to serve a REST API request, by route pattern, method and status.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method", "status"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_http_requests_in_flight",
			Help: "REST API requests being served.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_decisions_total",
			Help: "Rate limit decisions, by API, algorithm, accuracy (exact, approximate) and outcome (allowed, rejected, exempt).",
		}, []string{"api", "algorithm", "accuracy", "outcome"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_reservations_total",
			Help: "REST reservations (reserve_ttl) by outcome: made, committed, cancelled; and settles refused: already_settled, expired (found expired by its commit), reset (its counter was reset after it was made), not_found. Holds given back by expiry are throttle_reservations_expired_total.",
		}, []string{"outcome"}),
	}
	if reg == nil {
		return m
	}
	m.requests = register(reg, log, m.requests)
	m.duration = register(reg, log, m.duration)
	m.inFlight = register(reg, log, m.inFlight)
	m.decisions = register(reg, log, m.decisions)
	m.reservations = register(reg, log, m.reservations)
	return m
}

// register registers c, or returns the equal collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, log *slog.Logger, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	log.Error("register REST API metric", "err", err)
	return c
}
