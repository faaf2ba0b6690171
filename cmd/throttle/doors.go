package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// doorSettings say which of the pages that ask no key the REST port
// (PORT) serves beside its API: the reference service's POST /json, which
// spends counters, and the read-only /rlconfig and /metrics.
var doorSettings = []setting{
	{env: "JSON_ON_REST_PORT", flag: "json-on-rest-port", def: "false",
		usage: "serve the reference's POST /json (ShouldRateLimit in JSON) on PORT: true when started as ratelimit, the " +
			"reference's name (drop-in); it asks no key, so anyone who reaches PORT spends the descriptor configuration's " +
			"counters; a REST client's domain takes that client's API key, only Content-Type: application/json is taken, " +
			"and with GRPC_CLIENT_TLS_CACERT a call must bring the client certificate gRPC asks (HTTP_CLIENT_TLS_CACERT " +
			"then asks for one)",
		set: func(c *config, v string) (err error) { c.Doors.JSON, err = parseBool(v); return }},
	{env: "RLCONFIG_ON_REST_PORT", flag: "rlconfig-on-rest-port", def: "false",
		usage: "serve GET /rlconfig, the descriptor configuration in use (the operator's limits and domains), on PORT with no " +
			"key; the debug port serves it whatever this says, as the reference serves it there only",
		set: func(c *config, v string) (err error) { c.Doors.RLConfig, err = parseBool(v); return }},
	{env: "METRICS_ON_REST_PORT", flag: "metrics-on-rest-port", def: "true",
		usage: "serve GET /metrics (Prometheus; the series name domains and descriptor keys, and detailed_metric values) on " +
			"PORT with no key, where the chart and the manifests scrape it; false where PORT is public: the debug port's " +
			"/stats serves the same",
		set: func(c *config, v string) (err error) { c.Doors.Metrics, err = parseBool(v); return }},
}

// doorsConfig is doorSettings' part of config.
type doorsConfig struct {
	JSON, RLConfig, Metrics bool
}

// restDoors are the optional pages of the REST port as restapi.Deps takes
// them, nil where off: POST /json, GET /rlconfig's text and GET /metrics'
// gatherer.
func (a *app) restDoors(rls *ratelimitsvc.Server) (envoyJSON http.Handler, configDump func() string, metrics prometheus.Gatherer) {
	d := a.cfg.Doors
	if d.JSON {
		access := ratelimitsvc.JSONAccess{Keys: a.cache}
		if a.grpcTLS != nil && a.cfg.TLS.GRPCClientCA != "" {
			access.Peer = a.grpcTLS.CheckClient
			if a.cfg.TLS.HTTPClientCA == "" {
				a.log.Warn("POST /json refuses every call: gRPC asks client certificates (GRPC_CLIENT_TLS_CACERT) and /json asks the same, but PORT asks for none (HTTP_CLIENT_TLS_CACERT)")
			}
		}
		envoyJSON = rls.JSONHandler(access)
	}
	if d.RLConfig {
		configDump = a.configDump
	}
	if d.Metrics {
		metrics = a.metrics
	}
	return envoyJSON, configDump, metrics
}
