package restapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/store"
)

// apiKeyPrefix starts every API key, so keys are easy to recognise (and to
// find in leaked text).
const apiKeyPrefix = "thr_"

// newAPIKey returns a new API key: the prefix and 256 random bits in hex.
func newAPIKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return apiKeyPrefix + hex.EncodeToString(b[:])
}

type registerRequest struct {
	Name             string `json:"name"`
	Email            string `json:"email"`
	DefaultAlgorithm string `json:"default_algorithm"`
	Domain           string `json:"domain"`
}

type registerReply struct {
	ClientID         string    `json:"client_id"`
	APIKey           string    `json:"api_key"`
	Name             string    `json:"name"`
	Email            string    `json:"email"`
	Domain           string    `json:"domain"`
	DefaultAlgorithm string    `json:"default_algorithm"`
	CreatedAt        time.Time `json:"created_at"`
}

// errRegisterDegraded is why a registration the failure policy refused is
// the backend's failure: the counter backend could not count it.
var errRegisterDegraded = errors.New("the registration limit could not be counted: the failure policy (FAILURE_MODE) refused it")

// handleRegister creates a client and returns its API key, the only time the
// key is ever shown: only its SHA-256 is stored. Registrations are limited per
// client IP by limit; both the 201 and the 429 carry that limit's rate-limit
// headers (the sets that sets chooses; the 429 always has Retry-After). When
// the counter backend is down and the failure policy refuses (FAILURE_MODE
// closed, or local over this replica's count), it is a 503
// BACKEND_UNAVAILABLE: the caller is not to blame.
func handleRegister(db *store.DB, cache *store.Cache, limiter algorithms.Store, limit algorithms.Limit, trusted []netip.Prefix, sets ratelimitheader.Sets) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		req, err := decode[registerRequest](w, r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		switch {
		case req.Name == "":
			writeError(w, r, missingField("name is required"))
			return
		case req.Email == "":
			writeError(w, r, missingField("email is required"))
			return
		case req.DefaultAlgorithm != "":
			if _, err := algorithms.ParseAlgorithm(req.DefaultAlgorithm); err != nil {
				writeError(w, r, invalidField("default_algorithm must be "+algorithms.Names()))
				return
			}
		}

		ip := clientIP(r, trusted)
		dec, err := checkOne(ctx, limiter, algorithms.Request{Key: algorithms.Key{Scope: algorithms.RegistrationScope, Identifier: ip}, Limit: limit, Hits: 1})
		if err != nil {
			writeError(w, r, err)
			return
		}
		if !dec.Allowed && dec.Degraded {
			// FAILURE_MODE refused it, not the caller's count: the backend
			// is down (503 BACKEND_UNAVAILABLE, never 429).
			writeError(w, r, &backendError{errRegisterDegraded})
			return
		}
		lh := limitHeaders{policy: registerPolicy, limit: limit, remaining: dec.Remaining,
			resetAt: ceilUnix(dec.ResetAt()), reset: ceilSeconds(dec.ResetAfter)}
		if !dec.Allowed {
			retry := max(ceilSeconds(dec.RetryAfter), 1)
			lh.retryAfter = retry
			setLimitHeaders(w.Header(), sets, lh)
			writeError(w, r, &apiError{http.StatusTooManyRequests, "RATE_LIMITED",
				fmt.Sprintf("too many registrations from %s; retry in %d seconds", ip, retry)})
			return
		}

		key := newAPIKey()
		c, err := db.CreateClient(ctx, store.Client{
			Name:             req.Name,
			Email:            req.Email,
			Domain:           req.Domain,
			DefaultAlgorithm: algorithms.Algorithm(req.DefaultAlgorithm),
		}, sha256.Sum256([]byte(key)))
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		logFrom(ctx).Info("client registered", "client_id", c.ID, "domain", c.Domain)
		setLimitHeaders(w.Header(), sets, lh)
		w.Header().Set("Cache-Control", "no-store")
		encode(w, r, http.StatusCreated, registerReply{
			ClientID:         c.ID,
			APIKey:           key,
			Name:             c.Name,
			Email:            c.Email,
			Domain:           c.Domain,
			DefaultAlgorithm: string(c.DefaultAlgorithm),
			CreatedAt:        c.CreatedAt.UTC(),
		})
	})
}

// refresh reloads the cache after a write so the next request sees it. When
// that fails the write still stands, and the cache's poll picks it up.
func refresh(r *http.Request, cache *store.Cache) {
	if err := cache.Refresh(r.Context()); err != nil {
		logFrom(r.Context()).Warn("refresh cache after write", "err", err)
	}
}
