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

// registerDeps is what POST /register uses.
type registerDeps struct {
	DB             *store.DB
	Cache          *store.Cache
	Limiter        algorithms.Store
	Limit          algorithms.Limit
	TrustedProxies []netip.Prefix
	HeaderSets     ratelimitheader.Sets
	Grants         domainGrants
}

// handleRegister creates a client and returns its API key, the only time the
// key is ever shown: only its SHA-256 is stored. The body must be JSON
// (Content-Type application/json: a form, or a body without a type, could
// be any web page's, sent by its visitors' browsers without a preflight).
// A client gets a domain only as domainGrants allows. Registrations are
// limited per source by d.Limit (registrationSource: an IPv4 address, an
// IPv6 /64; the operator's are not), and by MAX_CLIENTS in all; both the 201
// and the 429 carry that limit's rate-limit headers (the sets that
// d.HeaderSets chooses; the 429 always has Retry-After). When the counter
// backend is down and the failure policy refuses (FAILURE_MODE closed, or
// local over this replica's count), it is a 503 BACKEND_UNAVAILABLE: the
// caller is not to blame.
func handleRegister(d registerDeps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		operator := d.Grants.operator(r)
		req, err := parseRegister(w, r)
		if err == nil {
			err = d.Grants.authorize(r, req.Domain, operator)
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		if operator {
			asOperator(ctx)
		} else if !allowRegistration(w, r, d) {
			return
		}
		key := newAPIKey()
		c, err := d.DB.CreateClient(ctx, store.Client{
			Name:             req.Name,
			Email:            req.Email,
			Domain:           req.Domain,
			DefaultAlgorithm: algorithms.Algorithm(req.DefaultAlgorithm),
		}, sha256.Sum256([]byte(key)))
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, d.Cache)
		logFrom(ctx).Info("client registered", "client_id", c.ID, "domain", c.Domain)
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

// parseRegister reads and checks the body of POST /register: JSON only.
func parseRegister(w http.ResponseWriter, r *http.Request) (registerRequest, error) {
	if err := checkJSONOnly(r.Header.Get("Content-Type"), "POST /register"); err != nil {
		return registerRequest{}, err
	}
	req, err := decode[registerRequest](w, r)
	switch {
	case err != nil:
		return req, err
	case req.Name == "":
		return req, missingField("name is required")
	case req.Email == "":
		return req, missingField("email is required")
	}
	if err := store.CheckDomain(req.Domain); err != nil {
		return req, err
	}
	if req.DefaultAlgorithm != "" {
		if _, err := algorithms.ParseAlgorithm(req.DefaultAlgorithm); err != nil {
			return req, invalidField("default_algorithm must be " + algorithms.Names())
		}
	}
	return req, nil
}

// allowRegistration counts a registration against the limit of its client
// IP and sets the limit's headers; when it is refused it writes the reply
// and returns false.
func allowRegistration(w http.ResponseWriter, r *http.Request, d registerDeps) bool {
	from := registrationSource(clientIP(r, d.TrustedProxies))
	dec, err := checkOne(r.Context(), d.Limiter, algorithms.Request{Key: algorithms.Key{Scope: algorithms.RegistrationScope, Identifier: from}, Limit: d.Limit, Hits: 1})
	if err != nil {
		writeError(w, r, err)
		return false
	}
	if !dec.Allowed && dec.Degraded {
		// FAILURE_MODE refused it, not the caller's count: the backend
		// is down (503 BACKEND_UNAVAILABLE, never 429).
		writeError(w, r, &backendError{errRegisterDegraded})
		return false
	}
	lh := limitHeaders{policy: registerPolicy, limit: d.Limit, remaining: dec.Remaining,
		resetAt: ceilUnix(dec.ResetAt()), reset: ceilSeconds(dec.ResetAfter)}
	if !dec.Allowed {
		retry := max(ceilSeconds(dec.RetryAfter), 1)
		lh.retryAfter = retry
		setLimitHeaders(w.Header(), d.HeaderSets, lh)
		writeError(w, r, &apiError{http.StatusTooManyRequests, "RATE_LIMITED",
			fmt.Sprintf("too many registrations from %s; retry in %d seconds", from, retry)})
		return false
	}
	setLimitHeaders(w.Header(), d.HeaderSets, lh)
	return true
}

// registrationSource is what the registration limit counts a caller at
// address ip under: the address itself for IPv4 (an IPv4-mapped IPv6
// address too), its /64 for IPv6 — one subnet hands its hosts any of
// 2^64 addresses, so a limit per address would bound nothing.
func registrationSource(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip // not an address (never, from clientIP): counted as it is
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
}

// refresh reloads the cache after a write so the next request sees it. When
// that fails the write still stands, and the cache's poll picks it up.
func refresh(r *http.Request, cache *store.Cache) {
	if err := cache.Refresh(r.Context()); err != nil {
		logFrom(r.Context()).Warn("refresh cache after write", "err", err)
	}
}
