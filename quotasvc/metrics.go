package quotasvc

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics, all throttle_rlqs_*. Domain
// labels only ever carry configured domains: a stream for any other is
// refused before it counts anything.
type metrics struct {
	streams     prometheus.Gauge
	buckets     prometheus.Gauge
	reports     prometheus.Counter
	reported    *prometheus.CounterVec // domain, decision
	subscribed  *prometheus.CounterVec // domain, limit
	assigned    *prometheus.GaugeVec   // domain
	actions     *prometheus.CounterVec // action
	ignored     *prometheus.CounterVec // reason
	refused     *prometheus.CounterVec // reason
	degraded    *prometheus.CounterVec // mode
	shadowed    prometheus.Counter
	storeErrors *prometheus.CounterVec // op
	assignTime  prometheus.Histogram
}

// newMetrics makes the service's metrics and registers them on reg, if
// any.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_rlqs_streams",
			Help: "Connected RLQS instances (Envoy streams) on this replica.",
		}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_rlqs_buckets",
			Help: "Buckets subscribed on this replica, one per instance and bucket.",
		}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_rlqs_reports_total",
			Help: "Usage report messages received.",
		}),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_reported_requests_total",
			Help: "Requests the instances reported, by domain and decision (allowed, denied).",
		}, []string{"domain", "decision"}),
		subscribed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_subscriptions_total",
			Help: "Buckets subscribed, by domain and what the bucket maps to: shared (a limit split among instances), no_limit (no descriptor matched: allow all), unlimited, shadow (allow all), deny (requests_per_unit 0).",
		}, []string{"domain", "limit"}),
		assigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "throttle_rlqs_assigned_rate",
			Help: "Requests per second assigned to this replica's instances by token buckets, by domain (allow-all buckets not included; under SHADOW_MODE, the shares decided, though allow-all is sent).",
		}, []string{"domain"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_actions_total",
			Help: "Bucket actions sent: token_bucket, allow_all, deny_all, abandon.",
		}, []string{"action"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_reports_ignored_total",
			Help: "Bucket usage reports ignored, by reason: empty_bucket_id, empty_bucket_entry, bucket_id_too_large, absurd_count, too_many_buckets.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_streams_refused_total",
			Help: "Streams ended with an error, by reason: no_domain, unknown_domain, domain_changed, config_pending, shutting_down.",
		}, []string{"reason"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_degraded_allocations_total",
			Help: "Limits assigned without the usage store (Redis failed), by how: last_known (the last shares), open (allow all), closed (deny all), local (this replica's instances split the limit).",
		}, []string{"mode"}),
		shadowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_rlqs_shadow_mode_total",
			Help: "Assignments SHADOW_MODE sent as allow-all in place of a token bucket or deny-all.",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_rlqs_store_errors_total",
			Help: "Failed calls to the usage store (Redis), by operation: write, load, save.",
		}, []string{"op"}),
		assignTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "throttle_rlqs_assign_seconds",
			Help:    "Time of one reassignment of every bucket on this replica, usage store included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	return m, m.register(reg)
}

// register registers every metric on reg; nil: nowhere.
func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.streams, m.buckets, m.reports, m.reported, m.subscribed, m.assigned, m.actions, m.ignored, m.refused, m.degraded, m.shadowed, m.storeErrors, m.assignTime} {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}
