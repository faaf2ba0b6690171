package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/refstats"
)

// The reference service's stats sink (package refstats): its stats names
// sent to statsd or DogStatsD, or mapped to Prometheus series on
// PROMETHEUS_ADDR. Not the metrics of /metrics (and of the debug port's
// /stats), nor the REST API's /stats/{client_id} (a client's usage).

// openStatsSink starts the reference service's stats sink when one is
// chosen (USE_STATSD, USE_DOG_STATSD or USE_PROMETHEUS, and not
// DISABLE_STATS): flushed every STATS_FLUSH_INTERVAL in the background, and
// a last time at shutdown, after the servers drained. The Prometheus sink's
// listener is bound by listen (listenStatsSink).
func (a *app) openStatsSink(context.Context) error {
	s := &a.cfg.Stats
	var sink refstats.Sink
	switch s.sink() {
	case "":
		return nil
	case sinkStatsd:
		sink = refstats.NewStatsdSink(s.StatsdHost, s.StatsdPort, s.StatsdProtocol, a.log)
	case sinkDogStatsd:
		var err error
		if sink, err = refstats.NewDogStatsdSink(net.JoinHostPort(s.StatsdHost, strconv.Itoa(s.StatsdPort)), s.Mogrifiers); err != nil {
			return fmt.Errorf("USE_DOG_STATSD: %w", err)
		}
	case sinkPrometheus:
		p, err := a.prometheusSink()
		if err != nil {
			return err
		}
		sink = p
	}
	a.refStats = refstats.New(sink, refstats.Options{ExtraTags: s.ExtraTags, MaxDomains: maxValueKeys(a.cfg.MaxValueStatsKeys)})
	every := s.FlushInterval
	a.goBG("reference stats", func(ctx context.Context) error { return a.refStats.Run(ctx, every, flushTimeout) })
	a.log.Info("reference stats on", "sink", s.sink(), "flush_interval", every.String())
	return nil
}

// prometheusSink is the sink of USE_PROMETHEUS, mapped by
// PROMETHEUS_MAPPER_YAML or the default mapping, and the server of its
// PROMETHEUS_PATH. A mapping file that cannot be read or does not load is
// logged, and the default mapping serves: the reference starts then too
// (mapping nothing), and Envoy Gateway mounts its file from a ConfigMap
// that is optional, which may come after the pod.
func (a *app) prometheusSink() (*refstats.PrometheusSink, error) {
	s := &a.cfg.Stats
	def := refstats.DefaultMapping(s.PrometheusResponseTimeMS)
	mapping := def
	if s.PrometheusMapperYAML != "" {
		b, err := os.ReadFile(s.PrometheusMapperYAML)
		if err == nil {
			err = refstats.CheckMapping(string(b))
		}
		if err != nil {
			a.log.Error("PROMETHEUS_MAPPER_YAML does not load; the reference stats are mapped by the default mapping", "file", s.PrometheusMapperYAML, "err", err)
		} else {
			mapping = string(b)
		}
	}
	p, err := refstats.NewPrometheusSink(mapping)
	if err != nil {
		return nil, fmt.Errorf("USE_PROMETHEUS: %w", err)
	}
	path, metrics := s.PrometheusPath, p.Handler()
	a.statsSinkSrv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		metrics.ServeHTTP(w, r)
	})}
	return p, nil
}

// listenStatsSink binds PROMETHEUS_ADDR, when USE_PROMETHEUS serves there, and
// serves it until close.
func (a *app) listenStatsSink() error {
	if a.statsSinkSrv == nil {
		return nil
	}
	l, err := net.Listen("tcp", a.cfg.Stats.PrometheusAddr)
	if err != nil {
		return fmt.Errorf("PROMETHEUS_ADDR: %w", err)
	}
	a.log.Info("serving the reference stats", "addr", l.Addr().String(), "path", a.cfg.Stats.PrometheusPath)
	srv := a.statsSinkSrv
	a.goBG("reference stats server", func(ctx context.Context) error {
		failed, err := serveUntil(ctx, srv, l, func() error {
			sctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		if failed != nil {
			return fmt.Errorf("PROMETHEUS_ADDR: %w", failed)
		}
		return err
	})
	return nil
}

// referenceStats is the service's ReferenceStats: nil when they are off
// (never a nil *refstats.Stats in the interface).
func (a *app) referenceStats() ratelimitsvc.ReferenceStats {
	if a.refStats == nil {
		return nil
	}
	return a.refStats
}

// onConfigLoad is the descriptors' Options.OnLoad: the reference's
// config_load_success and config_load_error; nil when the stats are off.
func (a *app) onConfigLoad() func(error) {
	if a.refStats == nil {
		return nil
	}
	return a.refStats.ConfigLoad
}
