package tlsreload

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the TLS metrics of a process, shared by its Reloaders (each
// labels its own by Options.Name).
type Metrics struct {
	handshakeFailures *prometheus.CounterVec
	reloadFailures    *prometheus.CounterVec
	expiry            *prometheus.GaugeVec
}

// NewMetrics registers the TLS metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_tls_handshake_failures_total",
			Help: "TLS handshakes a listener refused or that failed, by reason: no_certificate, unknown_ca, expired (or not yet valid), san_not_allowed (client certificates), other.",
		}, []string{"listener", "reason"}),
		reloadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_tls_reload_failures_total",
			Help: "Changed certificate, key or CA files that did not load (the last good ones are kept), by listener or client (redis).",
		}, []string{"listener"}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "throttle_tls_certificate_expiry_timestamp_seconds",
			Help: "When the certificate in use expires (Unix time), by listener (grpc, http) or client (redis).",
		}, []string{"listener"}),
	}
	for _, c := range []prometheus.Collector{m.handshakeFailures, m.reloadFailures, m.expiry} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// listen makes every series of a listener exist from the start, at 0.
func (m *Metrics) listen(name string) {
	if m == nil {
		return
	}
	for _, r := range reasons {
		m.handshakeFailures.WithLabelValues(name, r)
	}
}

func (m *Metrics) handshakeFailed(name, reason string) {
	if m != nil {
		m.handshakeFailures.WithLabelValues(name, reason).Inc()
	}
}

func (m *Metrics) reloadFailed(name string) {
	if m != nil {
		m.reloadFailures.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) certificateExpires(name string, at time.Time) {
	if m != nil {
		m.expiry.WithLabelValues(name).Set(float64(at.Unix()))
	}
}
