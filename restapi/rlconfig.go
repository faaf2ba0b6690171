package restapi

import (
	"io"
	"net/http"
)

// handleConfigDump serves GET /rlconfig: the descriptor configuration in
// use as plain text, one line per limit, as the reference service's debug
// endpoint of the same name (no authentication there either; it shows the
// operator's YAML limits, which /metrics already names, and never a
// client's rules). dump returns the text.
func handleConfigDump(dump func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, dump())
	})
}
