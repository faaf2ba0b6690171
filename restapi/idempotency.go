package restapi

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"
)

// Idempotent checks: a POST /check, /check/ip or /check/batch carrying an
// Idempotency-Key header (1 to 255 visible ASCII characters) is decided
// once per key and client. Its first reply (any status below 500) is kept
// for Deps.IdempotencyTTL, and a retry with the same key and the same body
// gets that status, body and rate-limit headers again, with
// Idempotent-Replayed: true, counting nothing. The same key with another
// body is 422 IDEMPOTENCY_KEY_REUSED. A retry that comes while the first is
// still being decided waits for its reply (up to idempotencyWait, then 409
// IDEMPOTENCY_KEY_IN_PROGRESS), so two concurrent requests with one key
// count once. A 5xx reply is not kept: the retry is decided anew. When the
// store itself fails the request is decided without it (logged).
//
// What identifies the request's subject is part of its fingerprint: for
// /check/ip the address the identifier is resolved from, so another
// address replaying a first one's key is 422, never the first one's
// decision. Replies are kept compactly (the body deflated), and each
// client keeps at most IdempotencyQuota's records and bytes: storing one
// more evicts that client's oldest first (a retry of an evicted key is
// decided anew), so no client can fill memory or Redis for the others.

// IdempotencyStore keeps the records of idempotent checks: opaque values by
// client and key, each with a time to live. Implementations: memory (the
// default) and Redis (internal/idempotency).
type IdempotencyStore interface {
	// Claim stores pending under client's key, for ttl, unless key holds
	// a value: it returns true when it stored it, else the value held (nil
	// when there was none by the time it looked: claim again). Pending
	// claims are small and short-lived, and count in no quota.
	Claim(ctx context.Context, client, key string, pending []byte, ttl time.Duration) (bool, []byte, error)
	// Put stores value under client's key for ttl, whatever key held, and
	// evicts client's oldest records while it has more than its quota's
	// records or bytes.
	Put(ctx context.Context, client, key string, value []byte, ttl time.Duration) error
	// Release deletes client's key.
	Release(ctx context.Context, client, key string) error
}

// IdempotencyQuota bounds what one client keeps: at most Records records
// of at most Bytes bytes in all; and what all clients keep in the memory
// store: at most TotalBytes (a zero field: no bound). Past TotalBytes a
// reply is not kept (its retry is decided anew), so one replica's memory
// holds at most TotalBytes of replies however many clients there are.
type IdempotencyQuota struct {
	Records    int
	Bytes      int64
	TotalBytes int64
}

// Default quota of a client's idempotency records.
const (
	DefaultIdempotencyRecords = 1000
	DefaultIdempotencyBytes   = 1 << 20
	// DefaultIdempotencyTotalBytes bounds all clients' replies in one
	// replica's memory (IDEMPOTENCY_MAX_BYTES_TOTAL).
	DefaultIdempotencyTotalBytes = 256 << 20
)

const (
	idempotencyHeader = "Idempotency-Key"
	replayedHeader    = "Idempotent-Replayed"
	// DefaultIdempotencyTTL is how long a first reply is kept by default.
	DefaultIdempotencyTTL = 24 * time.Hour
	// idempotencyWait is how long a retry waits for the first request's
	// reply.
	idempotencyWait = 10 * time.Second
	// pendingTTL bounds a claim whose request never finished (its replica
	// died): longer than any request may take (the server's 30 s write
	// timeout).
	pendingTTL = time.Minute
	// storeTimeout bounds each call to the store.
	storeTimeout    = time.Second
	idempotencyPoll = 10 * time.Millisecond
)

// idempotencyRecord is what the store keeps of a key: the request's
// fingerprint, and once decided, the reply (Body deflated).
type idempotencyRecord struct {
	Fingerprint string      `json:"f"`
	Done        bool        `json:"d,omitempty"`
	Status      int         `json:"s,omitempty"`
	Header      http.Header `json:"h,omitempty"`
	Body        []byte      `json:"b,omitempty"`
}

// idempotent makes next (a check route, behind authenticate) idempotent
// per Idempotency-Key. subject, when not nil, returns what identifies the
// request's subject beyond its body (the resolved address of /check/ip).
func idempotent(store IdempotencyStore, ttl time.Duration, subject func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ikey, ok := r.Header[idempotencyHeader]
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			if len(ikey) != 1 || !saneIdempotencyKey(ikey[0]) {
				writeError(w, r, &apiError{http.StatusBadRequest, "INVALID_IDEMPOTENCY_KEY", "Idempotency-Key must be one header of 1 to 255 visible ASCII characters"})
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
			if err != nil {
				writeError(w, r, errBodyTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			sum := sha256.Sum256([]byte(ikey[0]))
			var subj string
			if subject != nil {
				subj = subject(r)
			}
			k := idemKey{client: clientFrom(r.Context()).ID, key: hex.EncodeToString(sum[:])}
			serveIdempotent(w, r, next, store, ttl, k, fingerprint(r, subj, body))
		})
	}
}

// serveIdempotent claims key and decides the request, or replays the reply
// of the request that claimed it first.
func serveIdempotent(w http.ResponseWriter, r *http.Request, next http.Handler, store IdempotencyStore, ttl time.Duration, key idemKey, fp string) {
	pending, _ := json.Marshal(idempotencyRecord{Fingerprint: fp})
	deadline := time.Now().Add(idempotencyWait)
	for {
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		claimed, held, err := store.Claim(ctx, key.client, key.key, pending, pendingTTL)
		cancel()
		switch {
		case err != nil:
			logFrom(r.Context()).Warn("idempotency store unavailable: deciding without it", "err", err)
			next.ServeHTTP(w, r)
			return
		case claimed:
			decideAndKeep(w, r, next, store, ttl, key, fp)
			return
		}
		var rec idempotencyRecord
		if held != nil && json.Unmarshal(held, &rec) == nil {
			switch {
			case rec.Fingerprint != fp:
				writeError(w, r, &apiError{http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used with another request body: use a new key for a new request"})
				return
			case rec.Done:
				replay(w, r, rec)
				return
			}
		}
		if time.Now().After(deadline) {
			w.Header().Set("Retry-After", "1")
			writeError(w, r, &apiError{http.StatusConflict, "IDEMPOTENCY_KEY_IN_PROGRESS", "a request with this Idempotency-Key is still being decided; retry in a moment"})
			return
		}
		select {
		case <-r.Context().Done():
			return // the caller left
		case <-time.After(idempotencyPoll):
		}
	}
}

// decideAndKeep runs the request and keeps its reply under key; a 5xx is
// not kept (the key is released for a retry).
func decideAndKeep(w http.ResponseWriter, r *http.Request, next http.Handler, store IdempotencyStore, ttl time.Duration, key idemKey, fp string) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), storeTimeout)
	defer cancel()
	var err error
	if rec.Code >= 500 {
		err = store.Release(ctx, key.client, key.key)
	} else {
		done, _ := json.Marshal(idempotencyRecord{Fingerprint: fp, Done: true, Status: rec.Code, Header: rec.Header(), Body: deflate(rec.Body.Bytes())})
		err = store.Put(ctx, key.client, key.key, done, ttl)
	}
	if err != nil {
		logFrom(r.Context()).Warn("idempotency store: reply not kept", "err", err)
	}
	writeRecorded(w, rec.Code, rec.Header(), rec.Body.Bytes())
}

// replay writes a kept reply again, marked Idempotent-Replayed.
func replay(w http.ResponseWriter, r *http.Request, rec idempotencyRecord) {
	body, err := inflate(rec.Body)
	if err != nil { // a damaged record: the request may have counted, so no new decision
		writeError(w, r, fmt.Errorf("idempotency record: %w", err))
		return
	}
	w.Header().Set(replayedHeader, "true")
	logFrom(r.Context()).Debug("idempotent replay", "status", rec.Status)
	writeRecorded(w, rec.Status, rec.Header, body)
}

// idemKey names a record: the client's, under the hash of its
// Idempotency-Key.
type idemKey struct{ client, key string }

// deflate compresses a reply's body: a batch's hundred results repeat their
// field names, and shrink several times over.
func deflate(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := flate.NewWriter(&buf, flate.BestSpeed) // never fails for a valid level
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func inflate(b []byte) ([]byte, error) {
	return io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(b)), maxBodyBytes*64))
}

func writeRecorded(w http.ResponseWriter, status int, h http.Header, body []byte) {
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// fingerprint identifies a request's route, subject and body, byte for
// byte.
func fingerprint(r *http.Request, subject string, body []byte) string {
	h := sha256.New()
	io.WriteString(h, r.Method+" "+r.URL.Path+"\n"+subject+"\n")
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// saneIdempotencyKey: 1 to 255 visible ASCII characters.
func saneIdempotencyKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return false
		}
	}
	return true
}
