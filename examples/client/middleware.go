package throttleclient

import (
	"net"
	"net/http"
	"strconv"
)

// Middleware checks every request with c before passing it to the next
// handler. identify names who the request counts against; nil means the
// client's IP address (the connection's, as net/http sees it), and an empty
// result lets the request through unchecked (health checks, say).
//
// An allowed request gets X-RateLimit-Limit, -Remaining and -Reset headers on
// its response. A rejected one is answered here: 429, Retry-After, the same
// headers and a JSON error. When Throttle cannot be asked (down, slow, bad
// key), the request goes on unchecked, or is answered 503 if c.FailClosed.
func Middleware(c *Client, identify func(*http.Request) string, limit Limit) func(http.Handler) http.Handler {
	if identify == nil {
		identify = RemoteIP
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := identify(r)
			if id == "" {
				next.ServeHTTP(w, r)
				return
			}
			d, err := c.Check(r.Context(), id, limit)
			if err != nil {
				if c.OnError != nil {
					c.OnError(r, err)
				}
				if c.FailClosed {
					writeJSONError(w, http.StatusServiceUnavailable, "rate limiter unavailable")
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
			h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
			h.Set("X-RateLimit-Reset", strconv.FormatInt(d.ResetAt, 10))
			if !d.Allowed {
				h.Set("Retry-After", strconv.FormatInt(d.RetryAfter, 10))
				writeJSONError(w, http.StatusTooManyRequests, "rate limit exceeded")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// RemoteIP returns the host part of r.RemoteAddr. Behind a proxy that is the
// proxy's address; identify by a trusted header there instead.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":` + strconv.Quote(msg) + "}\n"))
}
