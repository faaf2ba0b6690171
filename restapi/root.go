package restapi

import (
	"net/http"
	"strings"
)

// rootReply is GET / for a program: where the parts of the server are.
type rootReply struct {
	Service   string `json:"service"`
	Dashboard string `json:"dashboard"`
	Register  string `json:"register"`
	Health    string `json:"health"`
	Ready     string `json:"ready"`
	Metrics   string `json:"metrics,omitempty"` // when GET /metrics is served
	Docs      string `json:"docs"`
}

// handleRoot answers GET /, the first URL a newcomer tries: a browser
// (Accept: text/html) goes to the dashboard at /ui/; any other client gets
// a JSON index of the server's entry points and where the docs are
// (/metrics when metrics says it is served).
func handleRoot(metrics bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/ui/", http.StatusFound)
			return
		}
		reply := rootReply{
			Service:   "throttle",
			Dashboard: "/ui/",
			Register:  "POST /register",
			Health:    "/health",
			Ready:     "/ready",
			Docs:      "README.md and docs/api.md (every endpoint) in Throttle's source repository",
		}
		if metrics {
			reply.Metrics = "/metrics"
		}
		encode(w, r, http.StatusOK, reply)
	})
}
