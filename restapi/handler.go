// Package restapi is Throttle's REST API: registration, /check and /check/ip,
// rules, exemptions, resets, usage stats, the Envoy counters, health and
// metrics, on net/http with Go 1.22 method and path patterns.
//
// The API's contract is openapi.yaml (OpenAPI 3.1), served at GET
// /openapi.json. Every route but /health, /ready, /metrics, /rlconfig,
// /openapi.json, /register and the reference's /json (whose own rules are
// in ratelimitsvc) needs an API key
// (header X-API-Key, or Authorization: Bearer). A key only ever sees its own
// client's rules, exemptions, counters and stats; the Envoy counters routes
// also take the operator key (Deps.AdminKey), and no other route does. Errors
// are JSON of the shape {"error": "…", "code": "…"}; routes.go lists the whole
// surface.
package restapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/store"
)

// Deps is what the REST API needs. DB, Cache, Usage and Limiter are required;
// every other field is optional.
type Deps struct {
	// MaxReservationTTL bounds a rule's reserve.ttl (MAX_RESERVATION_TTL);
	// 0: 60s.
	MaxReservationTTL time.Duration
	// GlobalScope says the server keeps limits of scope global: it has a
	// global Redis (GLOBAL_REDIS_URL). Default false: a rule with a limit
	// of "scope": "global" is refused, 400 GLOBAL_SCOPE_UNAVAILABLE.
	GlobalScope bool
	// Log receives one access line per request and every error, each with the
	// request's request_id. Default: discard.
	Log *slog.Logger
	// DB serves the cold path: registration, rule and exemption writes and
	// lists, and the readiness probe.
	DB *store.DB
	// Cache answers the hot path: API keys, rules and exemptions on /check.
	// It is refreshed after every write made through this API.
	Cache *store.Cache
	// Usage counts /check decisions for a client's usage, /stats/{client_id}.
	Usage *store.UsageRecorder
	// Limiter decides /check, /check/ip and the /register limit.
	Limiter algorithms.Store
	// LimiterReady asks the counter backend itself whether it answers, for
	// GET /ready, apart from any decision (redisstore.Store.Ready): each
	// master by name, nil when it answered, else why not (logged; the
	// reply shows only the name). Default nil: counters in memory, always
	// ready.
	LimiterReady func(ctx context.Context) map[string]error
	// FailureMode is what decides in place of masters LimiterReady finds
	// down (FAILURE_MODE): /ready is 503 when none answers under closed,
	// else 200 "degraded". Default "": open.
	FailureMode algorithms.FailureMode
	// Registerer receives the HTTP and decision metrics. Default: none
	// registered (the metrics still work, nobody scrapes them).
	Registerer prometheus.Registerer
	// Gatherer is served on GET /metrics. Default nil: no such route
	// (METRICS_ON_REST_PORT=false; the debug port still serves them, at its
	// /stats).
	Gatherer prometheus.Gatherer
	// TrustedProxies are the peers whose X-Forwarded-For and X-Real-IP are
	// believed when finding a request's client IP. Default: none.
	TrustedProxies []netip.Prefix
	// HeaderSets chooses the rate-limit headers of /check, /check/ip and
	// /register replies (setting RATE_LIMIT_HEADERS): X-RateLimit-*, the
	// IETF draft's RateLimit-Policy and RateLimit, or both. Retry-After is
	// on every rejection whatever it says. Default (zero value): both.
	HeaderSets ratelimitheader.Sets
	// RegisterLimit limits POST /register per client IP. Default (zero
	// value): 10 per hour, fixed window.
	RegisterLimit algorithms.Limit
	// Descriptors reports the descriptor YAML of a domain for GET
	// /descriptors (only ever asked about the caller's own domain). Default
	// nil: the server has no DESCRIPTORS_DIR.
	Descriptors func(domain string) DescriptorStatus
	// ConfigDump returns the text GET /rlconfig serves: the descriptor
	// configuration in use, in the reference service's format (an empty
	// text before it has one, as the reference answers). Default nil: no
	// such route, as the reference serves it only on its debug port
	// (RLCONFIG_ON_REST_PORT turns it on).
	ConfigDump func() string
	// EnvoyJSON serves POST /json, the reference service's JSON form of
	// ShouldRateLimit (ratelimitsvc.Server.JSONHandler). Default nil: no
	// such route.
	EnvoyJSON http.Handler
	// Healthcheck configures GET /healthcheck, the reference service's
	// health path (healthcheck.go). Default: "OK" while serving.
	Healthcheck Healthcheck
	// EnvoyCounters reads and resets the counters of Envoy descriptors for
	// POST /descriptors/{domain}/counters and …/counters/reset: the gRPC
	// rate-limit service (ratelimitsvc.Server). Default nil: no such routes.
	EnvoyCounters envoyCounters
	// AdminKey is the operator credential (setting ADMIN_API_KEY): on the
	// counters routes it acts on every domain, those of the descriptor YAML
	// included; on POST /register it grants the new client the domain it
	// asks for (domains.go); everywhere else it is no key at all. Default
	// "": none.
	AdminKey string
	// ClaimableDomains are the patterns of the Envoy domains a registration
	// may claim without the operator key (setting CLAIMABLE_DOMAINS): a
	// domain, or a prefix ending in '*' ("*": any domain). Default none:
	// only the operator grants domains.
	ClaimableDomains []string
	// ReservedDomain reports whether the descriptor configuration in use
	// (YAML files, xDS) names a domain: no client may have it. Default nil:
	// none is reserved.
	ReservedDomain func(domain string) bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// TracerProvider, when set, traces requests with OpenTelemetry (see
	// trace.go): a server span per request, in the caller's trace when its
	// headers carry one, and a "throttle.decide" span per /check decision.
	// Default nil, and the no-op provider alike: no spans, no cost.
	TracerProvider trace.TracerProvider
	// Propagator reads the caller's trace context from the request headers.
	// Default: W3C Trace Context (traceparent, tracestate).
	Propagator propagation.TextMapPropagator
	// CORSAllowedOrigins are the origins ("https://app.example.com", or
	// "*" for any) whose pages may call the API from a browser (setting
	// CORS_ALLOWED_ORIGIN; cors.go). Default none: no CORS headers.
	CORSAllowedOrigins []string
	// ListObjects makes GET /rules/list and /exemptions/list answer
	// {"rules": […]} and {"exemptions": […]}, as the original service did
	// (LIST_RESPONSE_FORMAT=object). Default false: bare arrays.
	ListObjects bool
	// Idempotency keeps the first replies of checks sent with an
	// Idempotency-Key (idempotency.go). Default: in this replica's memory.
	Idempotency IdempotencyStore
	// IdempotencyTTL is how long a first reply is kept (setting
	// IDEMPOTENCY_TTL). Default DefaultIdempotencyTTL, 24 hours.
	IdempotencyTTL time.Duration
	// IdempotencyQuota bounds each client's records in the memory store
	// (settings IDEMPOTENCY_MAX_RECORDS_PER_CLIENT and
	// IDEMPOTENCY_MAX_BYTES_PER_CLIENT; the Redis store takes its own).
	// Default DefaultIdempotencyRecords, DefaultIdempotencyBytes.
	IdempotencyQuota IdempotencyQuota
	// Reservations bounds reservations (reserve_ttl; reservations.go).
	// Default: each field's default.
	Reservations ReservationLimits
}

// maxBodyBytes is the largest request body accepted (413 above it).
const maxBodyBytes = 1 << 20

// NewHandler returns the REST API with its middleware: request ids, tracing
// (with Deps.TracerProvider), access logs and metrics, panic recovery, and
// JSON 404 and 405 replies.
func NewHandler(d Deps) http.Handler {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.IdempotencyQuota == (IdempotencyQuota{}) {
		d.IdempotencyQuota = IdempotencyQuota{Records: DefaultIdempotencyRecords, Bytes: DefaultIdempotencyBytes}
	}
	if d.Idempotency == nil {
		d.Idempotency = newMemoryIdempotency(time.Now, d.IdempotencyQuota)
	}
	if d.IdempotencyTTL <= 0 {
		d.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if d.RegisterLimit == (algorithms.Limit{}) {
		d.RegisterLimit = algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Hour}
	}
	d.Reservations.setDefaults()
	if d.Reservations.Ledger == nil {
		d.Reservations.Ledger = newMemoryLedger(d.Now)
	}
	m := newMetrics(d.Registerer, d.Log)
	tr := newTracing(d.TracerProvider, d.Propagator)

	mux := http.NewServeMux()
	addRoutes(mux, d, m, tr)

	var h http.Handler = withCORS(d.CORSAllowedOrigins, mux)(jsonMuxErrors(mux))
	h = recoverPanics(h)
	h = observe(m)(h)
	if tr != nil {
		h = tr.requests(h)
	}
	h = withRequestID(d.Log)(h)
	return h
}

// NewServer returns an *http.Server for h on addr with timeouts that bound
// slow clients: headers within 5 s, the whole request within 15 s, the reply
// within 30 s, idle keep-alive connections for 2 minutes, 64 KiB of headers.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// ruleOptions are what a rule body is checked against.
func (d Deps) ruleOptions() ruleOptions {
	return ruleOptions{maxTTL: d.maxReservationTTL(), globalScope: d.GlobalScope}
}

// outstanding is the cap of each client's outstanding reservations.
func (d Deps) outstanding() *outstanding {
	return &outstanding{ledger: d.Reservations.Ledger, max: d.Reservations.MaxOutstanding}
}

// maxReservationTTL is d.MaxReservationTTL with its default.
func (d Deps) maxReservationTTL() time.Duration {
	if d.MaxReservationTTL > 0 {
		return d.MaxReservationTTL
	}
	return time.Minute
}
