package ratelimitsvc

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a POST /json body; Envoy's requests are a few hundred
// bytes, and MaxDescriptors caps what one may ask.
const maxJSONBody = 1 << 20

// JSONHandler is the reference service's POST /json: a RateLimitRequest in
// protojson, as clients that cannot speak gRPC (a Lua filter) send it, and
// the RateLimitResponse in protojson. The status is 200 when the overall
// code is OK and 429 when it is OVER_LIMIT, as there; a body that is not a
// request, or a request the gRPC API refuses as invalid, is 400 (with the
// reason, as text); no decision because the backend failed or is
// overloaded is 503 (the reference answers 400 to both). Who may call it
// is access's (jsonaccess.go): a connection it refuses is 403, a body not
// sent as application/json 415, a REST client's domain without that
// client's key 401 or 403.
func (s *Server) JSONHandler(access JSONAccess) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := access.checkJSONPeer(r); f != nil {
			f.write(w)
			return
		}
		if f := checkJSONContentType(r); f != nil {
			f.write(w)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			http.Error(w, "request body over 1 MiB", http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "request body not read", http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a RateLimitRequest in JSON: "+clientText(err.Error()), http.StatusBadRequest)
			return
		}
		if f := s.checkJSONDomain(access, r, req.GetDomain()); f != nil {
			f.write(w)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			code := http.StatusServiceUnavailable
			if st.Code() == codes.InvalidArgument {
				code = http.StatusBadRequest
			}
			http.Error(w, st.Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil { // a response the service built: not the caller's fault
			s.opts.Log.ErrorContext(r.Context(), "POST /json: response not encoded", "err", err)
			http.Error(w, "response not encoded", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// maxErrorText bounds what of a decoding error a 400 repeats.
const maxErrorText = 256

// clientText is a decoding error's message as a reply may carry it: UTF-8
// text (protojson quotes the caller's bytes as they came, "invalid value
// \xb1"), at most maxErrorText bytes (it may quote a whole token).
func clientText(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) <= maxErrorText {
		return msg
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}
