package restapi

import (
	"net/http"
	"slices"
	"strings"
)

// Cross-origin access (setting CORS_ALLOWED_ORIGIN), so browser apps and
// dashboards served from another origin can call the API. Only the listed
// origins get CORS headers: a preflight (OPTIONS with
// Access-Control-Request-Method) is answered 204 with the route's methods
// and the request headers the API takes, and every other reply lets the
// page read the rate-limit headers. The API key travels in a header, never
// a cookie, so credentials are not allowed. An origin not listed gets no
// CORS headers (its preflight meets the route's 405), and the browser keeps
// the page from the reply.

// corsRequestHeaders are the request headers a page may send.
const corsRequestHeaders = "Authorization, Content-Type, Idempotency-Key, X-API-Key, X-Request-ID"

// corsExposedHeaders are the reply headers a page may read.
const corsExposedHeaders = "RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, " +
	"X-RateLimit-Reset, X-RateLimit-Algorithm, X-RateLimit-Warning, RateLimit-Degraded, Idempotent-Replayed, X-Request-ID"

// corsMaxAge is how long, in seconds, a browser may keep a preflight's answer.
const corsMaxAge = "600"

// corsMethods are the methods a preflight may ask for.
var corsMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}

// withCORS answers preflights and adds the CORS headers for the allowed
// origins ("*": any origin); none allowed, it adds nothing. mux finds a
// path's methods.
func withCORS(allowed []string, mux *http.ServeMux) func(http.Handler) http.Handler {
	anyOrigin := slices.Contains(allowed, "*")
	return func(next http.Handler) http.Handler {
		if len(allowed) == 0 {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Add("Vary", "Origin")
			origin := r.Header.Get("Origin")
			if origin == "" || !(anyOrigin || slices.Contains(allowed, origin)) {
				next.ServeHTTP(w, r)
				return
			}
			allow := origin
			if anyOrigin {
				allow = "*"
			}
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				methods := routeMethods(mux, r)
				if len(methods) == 0 {
					next.ServeHTTP(w, r) // no such route: its 404
					return
				}
				h.Add("Vary", "Access-Control-Request-Method")
				h.Add("Vary", "Access-Control-Request-Headers")
				h.Set("Access-Control-Allow-Origin", allow)
				h.Set("Access-Control-Allow-Methods", strings.Join(methods, ", "))
				h.Set("Access-Control-Allow-Headers", corsRequestHeaders)
				h.Set("Access-Control-Max-Age", corsMaxAge)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Expose-Headers", corsExposedHeaders)
			next.ServeHTTP(w, r)
		})
	}
}

// routeMethods lists the methods mux serves r's path with.
func routeMethods(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range corsMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && !strings.HasPrefix(pattern, "GET /ui/") {
			out = append(out, m)
		}
	}
	return out
}
