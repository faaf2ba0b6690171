package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/envoycounters"
	"github.com/throttle-rl/throttle/store"
)

// encode writes v as a JSON reply with status.
func encode[T any](w http.ResponseWriter, r *http.Request, status int, v T) {
	body, err := json.Marshal(v)
	if err != nil {
		logFrom(r.Context()).Error("encode reply", "err", err)
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal error","code":"INTERNAL"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n')) // an error here means the client went away
}

// encodeList writes list as a 200 reply: a bare JSON array, or, with
// asObject, an object holding it under name ({"rules": […]}), the shape
// the original service answered.
func encodeList[T any](w http.ResponseWriter, r *http.Request, asObject bool, name string, list []T) {
	if asObject {
		encode(w, r, http.StatusOK, map[string][]T{name: list})
		return
	}
	encode(w, r, http.StatusOK, list)
}

// decode reads the request body, at most maxBodyBytes of one JSON object, into
// a T. Unknown fields are refused so that a typo ("windwo") is reported rather
// than silently ignored. The errors it returns are *apiError.
//
// A missing Content-Type is accepted, and so is curl's default for -d
// (application/x-www-form-urlencoded), since the product's own curl examples
// send JSON that way; any other non-JSON type is 415.
func decode[T any](w http.ResponseWriter, r *http.Request) (T, error) {
	var v T
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return v, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return v, errBodyTooLarge
		}
		return v, &apiError{http.StatusBadRequest, "INVALID_BODY", "could not read the request body"}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return v, &apiError{http.StatusBadRequest, "INVALID_JSON", "request body is empty; send a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, &apiError{http.StatusBadRequest, "INVALID_JSON", "request body must hold exactly one JSON object"}
	}
	return v, nil
}

// decodeIdentified decodes a body whose identifier (as id reads it) is
// required.
func decodeIdentified[T any](w http.ResponseWriter, r *http.Request, id func(T) string) (T, error) {
	v, err := decode[T](w, r)
	if err == nil && id(v) == "" {
		err = missingField("identifier is required")
	}
	return v, err
}

var errBodyTooLarge = &apiError{http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE", fmt.Sprintf("request body is larger than %d bytes", maxBodyBytes)}

// checkJSONOnly refuses any Content-Type but JSON, a missing one
// included, for a route (what) a web page must not reach without a CORS
// preflight: browsers send a form, text/plain or a typeless body from any
// page without asking, never application/json.
func checkJSONOnly(ct, what string) error {
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &apiError{http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE", fmt.Sprintf("%s takes only Content-Type: application/json, not %s", what, ct)}
}

func checkContentType(ct string) error {
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded") {
		return nil
	}
	return &apiError{http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE", fmt.Sprintf("Content-Type %q is not supported; send application/json", ct)}
}

// jsonError turns a json.Decoder error into a 400 that names the problem.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return &apiError{http.StatusBadRequest, "INVALID_JSON", fmt.Sprintf("invalid JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{http.StatusBadRequest, "INVALID_JSON", "invalid JSON: unexpected end of body"}
	case errors.As(err, &typ):
		if typ.Field == "" {
			return &apiError{http.StatusBadRequest, "INVALID_JSON", fmt.Sprintf("request body must be a JSON object, not %s", typ.Value)}
		}
		return &apiError{http.StatusBadRequest, "INVALID_FIELD", fmt.Sprintf("field %q must be %s, not %s", typ.Field, jsonTypeName(typ.Type.Kind().String()), typ.Value)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return &apiError{http.StatusBadRequest, "UNKNOWN_FIELD", strings.TrimPrefix(err.Error(), "json: ")}
	}
	return &apiError{http.StatusBadRequest, "INVALID_JSON", "invalid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
}

func jsonTypeName(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "of another type"
}

// apiError is an error with the status, code and message a client sees.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

// missingField is a 400 MISSING_FIELD: a required field is missing.
func missingField(msg string) error {
	return &apiError{http.StatusBadRequest, "MISSING_FIELD", msg}
}

// invalidField is a 400 INVALID_FIELD: a field has an unacceptable value.
func invalidField(msg string) error {
	return &apiError{http.StatusBadRequest, "INVALID_FIELD", msg}
}

// errorReply is the body of every error reply.
type errorReply struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	RequestID string `json:"request_id,omitempty"`
}

// errorResponse maps err to what the client sees. It is the one table from
// errors to HTTP statuses: anything it does not know is a 500 whose details
// stay in the log.
func errorResponse(err error) (status int, code, message string) {
	var ae *apiError
	var be *backendError
	var qe *store.QuotaError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.message
	case errors.As(err, &qe) && qe.What == "clients":
		return http.StatusConflict, "TOO_MANY_CLIENTS",
			fmt.Sprintf("Throttle has %d clients, the most it takes (MAX_CLIENTS): no more registrations until the operator deletes some or raises it", qe.Max)
	case errors.As(err, &qe):
		return http.StatusConflict, "TOO_MANY_" + strings.ToUpper(qe.What),
			fmt.Sprintf("your client has %d %s, the most a client may have (MAX_%s_PER_CLIENT): delete some first", qe.Max, qe.What, strings.ToUpper(qe.What))
	case errors.Is(err, algorithms.ErrOverloaded):
		return http.StatusServiceUnavailable, "OVERLOADED", "Throttle could not decide within its deadline; no decision was made, try again"
	case errors.As(err, &be):
		return http.StatusServiceUnavailable, "BACKEND_UNAVAILABLE", "the rate limit backend is unavailable; try again"
	case errors.Is(err, errForeignDomain):
		return http.StatusForbidden, "FORBIDDEN_DOMAIN", err.Error()
	case errors.Is(err, errOperatorKeyRequired):
		return http.StatusForbidden, "OPERATOR_KEY_REQUIRED", err.Error()
	case errors.Is(err, envoycounters.ErrNoLimits):
		return http.StatusNotFound, "DOMAIN_NOT_FOUND", err.Error()
	case errors.Is(err, envoycounters.ErrInvalid):
		return http.StatusBadRequest, "INVALID_DESCRIPTORS", err.Error()
	case errors.Is(err, store.ErrUnavailable):
		return http.StatusServiceUnavailable, "STORE_UNAVAILABLE", "the database is unavailable; try again"
	case errors.Is(err, store.ErrInvalid):
		return http.StatusBadRequest, "INVALID_FIELD", err.Error()
	case errors.Is(err, algorithms.ErrInvalid):
		return http.StatusBadRequest, "INVALID_LIMIT", err.Error()
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, "NOT_FOUND", err.Error()
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, "CONFLICT", err.Error()
	}
	return http.StatusInternalServerError, "INTERNAL", "internal error"
}

// writeError replies with err as JSON. Server errors (5xx) are logged here,
// once, with the cause; the client only sees the code and the request id.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := errorResponse(err)
	reply := errorReply{Error: msg, Code: code}
	switch {
	case code == "OVERLOADED":
		// Expected under overload, counted by throttle_shed_total: one
		// line per request would make it worse.
		logFrom(r.Context()).Debug("request shed", "err", err)
		reply.RequestID = requestIDFrom(r.Context())
	case status >= 500:
		logFrom(r.Context()).Error("request failed", "status", status, "code", code, "err", err)
		reply.RequestID = requestIDFrom(r.Context())
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	encode(w, r, status, reply)
}

// backendError marks a failure of the counter backend (the Limiter): 503,
// the cause logged.
type backendError struct{ err error }

func (e *backendError) Error() string { return "rate limit backend: " + e.err.Error() }
func (e *backendError) Unwrap() error { return e.err }
