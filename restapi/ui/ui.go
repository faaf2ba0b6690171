// Package ui is Throttle's operator dashboard: one page of plain HTML, CSS
// and JavaScript, embedded in the binary, that restapi serves at /ui/. It is
// a thin client of the REST API: an operator pastes an API key, and the page
// calls the API with it (X-API-Key), keeping the key in the tab's
// sessionStorage only. Nothing on the page loads from anywhere but the
// server itself.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// contentSecurityPolicy lets the page load only its own files and call only
// its own server: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files; mount it at prefix (such as
// "/ui/"), whose index is the page. A path that names no file is handed to
// notFound, so the server answers it as it answers any unknown route.
func Handler(prefix string, notFound http.Handler) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		// fs.Sub fails only for an invalid path; "static" is a constant.
		files = static
	}
	fileServer := http.StripPrefix(prefix, http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, prefix)
		if name == "" {
			name = "index.html"
		}
		if fi, err := fs.Stat(files, name); err != nil || fi.IsDir() {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary: always revalidate.
		h.Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}
