package restapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/throttle-rl/throttle/restapi/ui"
	"github.com/throttle-rl/throttle/store"
)

// routeTable is where addRoutes puts the routes: an *http.ServeMux, or
// the test's list compared with the OpenAPI document.
type routeTable interface {
	Handle(pattern string, h http.Handler)
}

// addRoutes lists the whole REST surface.
func addRoutes(mux routeTable, d Deps, m *metrics, tr *tracing) {
	auth := authenticate(d.Cache)                        // the client's own key
	checkAuth := authenticate(d.Cache, store.ScopeCheck) // or a check-only key
	check := checkDeps{
		Cache: d.Cache, Usage: d.Usage, TrustedProxies: d.TrustedProxies, HeaderSets: d.HeaderSets, Now: d.Now,
		Limiter:      tr.decisions(d.Limiter), // /check and /check/ip decide in a span of their own when traced
		Reservations: d.Reservations, Outstanding: d.outstanding(),
	}

	mux.Handle("GET /{$}", handleRoot(d.Gatherer != nil))
	mux.Handle("GET /health", handleHealth())
	mux.Handle("GET /ready", handleReady(d.DB, d.LimiterReady, d.FailureMode))
	mux.Handle("GET /healthcheck", handleHealthcheck(d.Healthcheck))
	if d.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	}
	if d.ConfigDump != nil {
		mux.Handle("GET /rlconfig", handleConfigDump(d.ConfigDump))
	}
	mux.Handle("GET /openapi.json", handleOpenAPI())

	mux.Handle("POST /register", handleRegister(registerDeps{
		DB: d.DB, Cache: d.Cache, Limiter: d.Limiter, Limit: d.RegisterLimit, TrustedProxies: d.TrustedProxies, HeaderSets: d.HeaderSets,
		Grants: newDomainGrants(d.ClaimableDomains, d.ReservedDomain, d.AdminKey),
	}))
	mux.Handle("GET /me", auth(handleMe()))
	mux.Handle("POST /keys", auth(handleKeyCreate(d.DB, d.Cache)))
	mux.Handle("GET /keys", auth(handleKeyList(d.DB, d.ListObjects)))
	mux.Handle("DELETE /keys/{id}", auth(handleKeyDelete(d.DB, d.Cache)))

	once := idempotent(d.Idempotency, d.IdempotencyTTL, nil) // with an Idempotency-Key
	address := func(r *http.Request) string { return clientIP(r, d.TrustedProxies) }
	mux.Handle("POST /check", checkAuth(once(handleCheck(check, m, false))))
	mux.Handle("POST /check/ip", checkAuth(idempotent(d.Idempotency, d.IdempotencyTTL, address)(handleCheck(check, m, true))))
	mux.Handle("POST /check/batch", checkAuth(once(handleCheckBatch(check, m))))
	mux.Handle("POST /reservations/{id}/commit", checkAuth(handleReservationSettle(d.Limiter, check.Outstanding, m, false)))
	mux.Handle("DELETE /reservations/{id}", checkAuth(handleReservationSettle(d.Limiter, check.Outstanding, m, true)))
	mux.Handle("POST /reset", auth(handleReset(d.Limiter, check.Outstanding)))

	mux.Handle("POST /rules", auth(handleRuleCreate(d.DB, d.Cache, d.ruleOptions())))
	mux.Handle("GET /rules/list", auth(handleRuleList(d.DB, d.ListObjects)))
	mux.Handle("PUT /rules/{name}", auth(handleRuleUpdate(d.DB, d.Cache, d.ruleOptions())))
	mux.Handle("DELETE /rules/{name}", auth(handleRuleDelete(d.DB, d.Cache)))
	mux.Handle("POST /rules/{name}/overrides", auth(handleOverridePut(d.DB, d.Cache)))
	mux.Handle("GET /rules/{name}/overrides", auth(handleOverrideList(d.DB)))
	mux.Handle("DELETE /rules/{name}/overrides/{identifier...}", auth(handleOverrideDelete(d.DB, d.Cache)))

	mux.Handle("POST /exemptions", auth(handleExemptionCreate(d.DB, d.Cache)))
	mux.Handle("GET /exemptions/list", auth(handleExemptionList(d.DB, d.ListObjects)))
	mux.Handle("DELETE /exemptions/{identifier...}", auth(handleExemptionDelete(d.DB, d.Cache)))

	mux.Handle("GET /stats/{client_id}", auth(handleUsage(d.Usage, d.Limiter, check.Outstanding)))
	mux.Handle("GET /descriptors", auth(handleDescriptors(d.Descriptors)))
	if d.EnvoyJSON != nil {
		mux.Handle("POST /json", d.EnvoyJSON)
	}
	if d.EnvoyCounters != nil {
		counters := authenticateCounters(d.Cache, d.AdminKey) // a client key, or the operator's
		mux.Handle("POST /descriptors/{domain}/counters", counters(handleCountersRead(d.EnvoyCounters)))
		mux.Handle("POST /descriptors/{domain}/counters/reset", counters(handleCountersReset(d.EnvoyCounters)))
	}

	mux.Handle("GET /ui/", ui.Handler("/ui/", handleNotFound()))
}
