package restapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/throttle-rl/throttle/internal/apikey"
	"github.com/throttle-rl/throttle/store"
)

// requestState travels in a request's context: its id, its logger (carrying
// request_id, and client_id once authenticated), and the authenticated client
// or operator.
type requestState struct {
	id     string
	log    *slog.Logger
	client *store.Client
	// operator: authenticated with the operator key (ADMIN_API_KEY), on
	// the routes that take it (authenticateCounters); client is nil then.
	operator bool
}

type stateKey struct{}

func stateFrom(ctx context.Context) *requestState {
	s, _ := ctx.Value(stateKey{}).(*requestState)
	return s
}

// logFrom returns the request's logger. Outside a request it discards.
func logFrom(ctx context.Context) *slog.Logger {
	if s := stateFrom(ctx); s != nil {
		return s.log
	}
	return slog.New(slog.DiscardHandler)
}

func requestIDFrom(ctx context.Context) string {
	if s := stateFrom(ctx); s != nil {
		return s.id
	}
	return ""
}

// clientFrom returns the client authenticate found. Only handlers behind
// authenticate call it.
func clientFrom(ctx context.Context) store.Client {
	if s := stateFrom(ctx); s != nil && s.client != nil {
		return *s.client
	}
	return store.Client{}
}

// withRequestID gives every request an id, returned in X-Request-ID, and a
// logger carrying it. A caller's own X-Request-ID is kept when it is 1 to 128
// printable ASCII characters without spaces; otherwise a random one is made.
func withRequestID(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get("X-Request-ID")
			if !saneRequestID(id) {
				id = newRequestID()
			}
			w.Header().Set("X-Request-ID", id)
			st := &requestState{id: id, log: log.With("request_id", id)}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
		})
	}
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status and size of a reply.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe counts and times every request by route (the mux pattern, never the
// raw path), method and status, and writes one access log line. It must wrap
// the mux with the same *http.Request, so that it sees r.Pattern the mux set.
func observe(m *metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			m.inFlight.Inc()
			defer m.inFlight.Dec()
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)

			elapsed := time.Since(start)
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			method := methodLabel(r.Method)
			code := strconv.Itoa(status)
			m.requests.WithLabelValues(route, method, code).Inc()
			m.duration.WithLabelValues(route, method, code).Observe(elapsed.Seconds())

			level := slog.LevelInfo
			switch route {
			case "GET /health", "GET /ready", "GET /metrics":
				level = slog.LevelDebug
			}
			logFrom(r.Context()).LogAttrs(r.Context(), level, "request",
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.String("path", r.URL.Path),
				slog.Int("status", status),
				slog.Int64("bytes", sw.bytes),
				slog.Duration("duration", elapsed),
				slog.String("remote_addr", r.RemoteAddr),
			)
		})
	}
}

// methodLabel keeps the method label's values few: anything unusual is "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// recoverPanics turns a panic into a 500 INTERNAL reply carrying the request
// id, and logs it with its stack. http.ErrAbortHandler is passed on.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			logFrom(r.Context()).Error("panic", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				return // the reply has begun; nothing sane can follow
			}
			encode(w, r, http.StatusInternalServerError, errorReply{
				Error: "internal error", Code: "INTERNAL", RequestID: requestIDFrom(r.Context()),
			})
		}()
		next.ServeHTTP(w, r)
	})
}

// handleNotFound answers as an unknown route does.
func handleNotFound() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, routeNotFound(r))
	})
}

// routeNotFound is the 404 of a request no route serves.
func routeNotFound(r *http.Request) error {
	return &apiError{http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("no such route: %s %s", r.Method, r.URL.Path)}
}

// jsonMuxErrors makes the mux's own 404 and 405 replies JSON. 405 keeps the
// Allow header the mux sets.
func jsonMuxErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			w = &muxErrorWriter{ResponseWriter: w, r: r}
		}
		mux.ServeHTTP(w, r)
	})
}

// muxErrorWriter replaces the plain-text body of the mux's 404 and 405.
type muxErrorWriter struct {
	http.ResponseWriter
	r       *http.Request
	wrote   bool
	swallow bool
}

func (w *muxErrorWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	var err error
	switch code {
	case http.StatusNotFound:
		err = routeNotFound(w.r)
	case http.StatusMethodNotAllowed:
		err = &apiError{code, "METHOD_NOT_ALLOWED", fmt.Sprintf("method %s is not allowed on %s; allowed: %s", w.r.Method, w.r.URL.Path, w.Header().Get("Allow"))}
	default:
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.swallow = true
	w.Header().Del("Content-Length")
	writeError(w.ResponseWriter, w.r, err)
}

func (w *muxErrorWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.swallow {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *muxErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// authenticate admits requests carrying a known API key, in X-API-Key or as
// "Authorization: Bearer <key>", and puts the key's client in the context.
// Keys are looked up by SHA-256 in the cache, never in the database, and
// never logged. It admits a client's own key; a scoped key only when its
// scope is one of scopes (a check-only key elsewhere is 403 KEY_SCOPE).
func authenticate(cache *store.Cache, scopes ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := apiKey(r)
			if key == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="throttle"`)
				writeError(w, r, &apiError{http.StatusUnauthorized, "MISSING_API_KEY", "an API key is required: send it in the X-API-Key header"})
				return
			}
			c, scope, ok := cache.KeyByHash(sha256.Sum256([]byte(key)))
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="throttle", error="invalid_token"`)
				writeError(w, r, &apiError{http.StatusUnauthorized, "INVALID_API_KEY", "the API key is not valid"})
				return
			}
			if scope != "" && !slices.Contains(scopes, scope) {
				writeError(w, r, &apiError{http.StatusForbidden, "KEY_SCOPE", fmt.Sprintf("this API key has scope %q: it may only call POST /check, /check/ip and /check/batch; use the client's own key", scope)})
				return
			}
			st := stateFrom(r.Context())
			if st == nil { // served without withRequestID (tests of one handler)
				st = &requestState{log: slog.New(slog.DiscardHandler)}
				r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
			}
			st.client = &c
			st.log = st.log.With("client_id", c.ID)
			next.ServeHTTP(w, r)
		})
	}
}

// apiKey returns the key from X-API-Key, or from an Authorization: Bearer
// header.
func apiKey(r *http.Request) string { return apikey.FromRequest(r) }
