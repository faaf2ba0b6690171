// Package apikey reads a client's API key from an HTTP request, as every
// HTTP door takes it: the X-API-Key header, or an Authorization: Bearer
// token.
package apikey

import (
	"net/http"
	"strings"
)

// FromRequest returns the key of X-API-Key, else of an Authorization:
// Bearer header; "" when there is none.
func FromRequest(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-API-Key")); k != "" {
		return k
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	return ""
}
