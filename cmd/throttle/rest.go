package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/internal/idempotency"
	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/restapi"
)

// The REST port beyond its core: the pages it serves without a key
// (doorSettings), the reference's /healthcheck, and the settings of the
// REST API for apps (restAppSettings).

// restAppSettings are the REST API's for apps in browsers and clients:
// CORS, the list format, idempotency, reservations.
var restAppSettings = []setting{
	{env: "CORS_ALLOWED_ORIGIN", flag: "cors-allowed-origin",
		usage: "comma-separated origins (https://app.example.com, or *) whose browser pages may call the REST API: preflights " +
			"answered, rate-limit headers exposed; empty = no cross-origin access",
		set: func(c *config, v string) (err error) { c.REST.CORSAllowedOrigins, err = parseOrigins(v); return }},
	{env: "LIST_RESPONSE_FORMAT", flag: "list-response-format", def: "array",
		usage: "GET /rules/list and /exemptions/list answer bare arrays (array), or {\"rules\": [...]} and {\"exemptions\": " +
			"[...]} as the original service did (object)",
		set: func(c *config, v string) (err error) { c.REST.ListObjects, err = parseListFormat(v); return }},
	{env: "IDEMPOTENCY_TTL", flag: "idempotency-ttl", def: durationText(restapi.DefaultIdempotencyTTL),
		usage: "how long a REST check's first reply is kept for its Idempotency-Key (in Redis with REDIS_URL, else in memory)",
		set:   func(c *config, v string) (err error) { c.REST.IdempotencyTTL, err = parseIdempotencyTTL(v); return }},
	{env: "IDEMPOTENCY_MAX_RECORDS_PER_CLIENT", flag: "idempotency-max-records-per-client", def: strconv.Itoa(restapi.DefaultIdempotencyRecords),
		usage: "most Idempotency-Key replies one client keeps (in Redis or memory); one more evicts that client's oldest, " +
			"whose retry is then decided anew",
		set: func(c *config, v string) (err error) { c.REST.IdempotencyQuota.Records, err = parsePositive(v); return }},
	{env: "IDEMPOTENCY_MAX_BYTES_PER_CLIENT", flag: "idempotency-max-bytes-per-client", def: strconv.Itoa(restapi.DefaultIdempotencyBytes),
		usage: "most bytes of Idempotency-Key replies one client keeps (replies are stored compressed); past it that client's " +
			"oldest are evicted",
		set: func(c *config, v string) (err error) {
			n, err := parsePositive(v)
			c.REST.IdempotencyQuota.Bytes = int64(n)
			return err
		}},
	{env: "IDEMPOTENCY_MAX_BYTES_TOTAL", flag: "idempotency-max-bytes-total", def: strconv.Itoa(restapi.DefaultIdempotencyTotalBytes),
		usage: "without REDIS_URL: most bytes of Idempotency-Key replies all clients keep in this replica's memory; past it a " +
			"reply is not kept (its retry is decided anew) and no client's are evicted for another's (in Redis, " +
			"MAX_CLIENTS × IDEMPOTENCY_MAX_BYTES_PER_CLIENT and IDEMPOTENCY_REDIS_MEMORY_PERCENT bound them)",
		set: func(c *config, v string) (err error) {
			n, err := parsePositive(v)
			c.REST.IdempotencyQuota.TotalBytes = int64(n)
			return err
		}},
	{env: "IDEMPOTENCY_REDIS_MEMORY_PERCENT", flag: "idempotency-redis-memory-percent", def: "80",
		usage: "no Idempotency-Key reply is kept in Redis while its used memory is at or past this percent of its maxmemory, " +
			"so the records never take the counters' room (with maxmemory-policy noeviction); 100 turns the budget off",
		set: func(c *config, v string) (err error) { c.REST.IdempotencyMemoryPercent, err = parsePercent(v); return }},
	{env: "RESERVATION_MAX_FRACTION", flag: "reservation-max-fraction", def: strconv.FormatFloat(restapi.DefaultReservationMaxFraction, 'g', -1, 64),
		usage: "largest share of its limit one reservation may hold, above 0 and at most 1; more is 400 INVALID_FIELD",
		set: func(c *config, v string) (err error) {
			c.REST.Reservations.MaxFraction, err = parseShare(v)
			return
		}},
	{env: "RESERVATION_MAX_OUTSTANDING_PER_CLIENT", flag: "reservation-max-outstanding-per-client", def: strconv.Itoa(restapi.DefaultReservationMaxOutstanding),
		usage: "most reservations one client may have outstanding (neither settled nor expired) on every replica together " +
			"(counted in Redis with REDIS_URL, else per replica); one more is 429 TOO_MANY_RESERVATIONS, nothing counted",
		set: func(c *config, v string) (err error) {
			c.REST.Reservations.MaxOutstanding, err = parsePositive(v)
			return
		}},
}

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

// healthcheckSettings are the reference's /healthcheck's own.
var healthcheckSettings = []setting{
	{env: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", flag: "healthy-with-at-least-one-config-loaded", def: "false", ref: upstreamDefault("false"),
		usage: "GET /healthcheck answers 500 until a descriptor configuration has loaded (files or xDS), as the reference's",
		set:   func(c *config, v string) (err error) { c.HealthyWithConfig, err = parseBool(v); return }},
}

// healthcheck is GET /healthcheck's configuration: with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, every Redis master must answer; with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, a descriptor configuration of at
// least one domain must have loaded (files or xDS), as the reference's
// (an empty xDS snapshot is a configuration without domains).
func (a *app) healthcheck() restapi.Healthcheck {
	var h restapi.Healthcheck
	if a.cfg.HealthyWithConfig {
		h.ConfigLoaded = func() bool {
			if a.current == nil {
				return false
			}
			c := a.current()
			return c != nil && c.DomainCount() > 0
		}
	}
	if a.cfg.RedisHealthCheck && a.ready != nil {
		h.Redis = a.ready // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: every master answers
	}
	return h
}

// restAppsConfig is the settings of the REST API for apps (issue 31):
// CORS_ALLOWED_ORIGIN, LIST_RESPONSE_FORMAT, IDEMPOTENCY_TTL and the
// idempotency quotas (IDEMPOTENCY_MAX_*_PER_CLIENT).
type restAppsConfig struct {
	// CORSAllowedOrigins are the origins whose pages may call the API ("*":
	// any); none by default.
	CORSAllowedOrigins []string
	// ListObjects: /rules/list and /exemptions/list answer objects, as the
	// original service did (LIST_RESPONSE_FORMAT=object).
	ListObjects bool
	// IdempotencyTTL is how long a check's first reply is kept for its
	// Idempotency-Key.
	IdempotencyTTL time.Duration
	// IdempotencyQuota bounds each client's kept replies
	// (IDEMPOTENCY_MAX_RECORDS_PER_CLIENT, IDEMPOTENCY_MAX_BYTES_PER_CLIENT).
	IdempotencyQuota restapi.IdempotencyQuota
	// IdempotencyMemoryPercent: no reply is kept in a Redis this full
	// (IDEMPOTENCY_REDIS_MEMORY_PERCENT; 100: no budget).
	IdempotencyMemoryPercent int
	// Reservations bounds reservations (MAX_RESERVATION_TTL,
	// RESERVATION_MAX_FRACTION, RESERVATION_MAX_OUTSTANDING_PER_CLIENT).
	Reservations restapi.ReservationLimits
}

// parseOrigins reads CORS_ALLOWED_ORIGIN: comma-separated origins, a
// trailing '/' dropped; nil for none.
func parseOrigins(v string) ([]string, error) {
	var out []string
	var errs []error
	for _, o := range strings.Split(v, ",") {
		o = strings.TrimSuffix(strings.TrimSpace(o), "/")
		if o == "" {
			continue
		}
		if !isOrigin(o) {
			errs = append(errs, fmt.Errorf("%q is not an origin such as https://app.example.com (scheme and host, no path) or *", o))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// parseListFormat reads LIST_RESPONSE_FORMAT: true for object.
func parseListFormat(v string) (bool, error) {
	switch v {
	case "array", "object":
		return v == "object", nil
	}
	return false, fmt.Errorf("%q is not array or object", v)
}

// parseIdempotencyTTL reads IDEMPOTENCY_TTL: a duration of at least 1s.
func parseIdempotencyTTL(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q is not a duration of at least 1s, such as 24h", v)
	}
	return d, nil
}

// isOrigin reports whether o is "*" or a browser origin: http(s), a host,
// an optional port, nothing else.
func isOrigin(o string) bool {
	if o == "*" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Path == "" &&
		u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

// openIdempotency keeps idempotent checks' replies in Redis with REDIS_URL,
// so every replica answers a retry alike; without it the REST API keeps
// them in memory.
func (a *app) openIdempotency(context.Context) error {
	if a.cfg.Redis.URL == "" {
		return nil
	}
	rdb, err := newRedis(a.cfg.Redis, "REDIS_", a.redisTLS)
	if err != nil {
		return err
	}
	q := a.cfg.REST.IdempotencyQuota
	a.idempotency = idempotency.NewRedis(rdb, a.cfg.CacheKeyPrefix, idempotency.Quota{Records: q.Records, Bytes: q.Bytes, MemoryPercent: a.cfg.REST.IdempotencyMemoryPercent % 100})
	a.onClose(func() { rdb.Close() })
	return nil
}

// withRESTApps adds the REST API for apps' settings to d.
func (a *app) withRESTApps(d restapi.Deps) restapi.Deps {
	c := a.cfg.REST
	d.CORSAllowedOrigins, d.ListObjects, d.IdempotencyTTL = c.CORSAllowedOrigins, c.ListObjects, c.IdempotencyTTL
	d.IdempotencyQuota = c.IdempotencyQuota
	d.Reservations = c.Reservations
	if a.ledger != nil {
		d.Reservations.Ledger = a.ledger
	}
	if a.idempotency != nil {
		d.Idempotency = a.idempotency
	}
	return d
}
