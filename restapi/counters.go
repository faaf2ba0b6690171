package restapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/throttle-rl/throttle/internal/envoycounters"
	"github.com/throttle-rl/throttle/internal/inputsize"
	"github.com/throttle-rl/throttle/store"
)

// The counters of Envoy descriptors (the gRPC rate-limit service's), read
// and reset over REST — to clear a login limit after a correct password, or
// look at a tenant's budget:
//
//	POST /descriptors/{domain}/counters        read, counting nothing
//	POST /descriptors/{domain}/counters/reset  delete, so the next request starts afresh
//
// The body names the descriptors as Envoy sends them,
// {"descriptors": [{"entries": [{"key": "k", "value": "v"}, …], "limit": {…}}]},
// and each is matched exactly as the rate-limit service matches a request's
// (same limits, same counters). The owner of a domain made of REST rules
// (the client whose domain it is) may do it with its API key; a domain of
// the descriptor YAML needs the operator key, ADMIN_API_KEY, which also
// works for every domain. A client key never reads or resets another
// domain's counters.

// envoyCounters is the rate-limit service's side (ratelimitsvc.Server).
type envoyCounters interface {
	DomainSource(domain string) envoycounters.Source
	ReadCounters(ctx context.Context, domain string, ds []envoycounters.Descriptor) ([]envoycounters.Counters, error)
	ResetCounters(ctx context.Context, domain string, ds []envoycounters.Descriptor) ([]envoycounters.Counters, int, error)
}

// Refusals of the counters routes (errorResponse maps them).
var (
	errForeignDomain       = errors.New("not the API key's domain")
	errOperatorKeyRequired = errors.New("the operator key is required")
)

// countersRequest is the body of both counters routes.
type countersRequest struct {
	Descriptors []counterDescriptorJSON `json:"descriptors"`
}

type counterDescriptorJSON struct {
	Entries []counterEntryJSON `json:"entries"`
	Limit   *counterOverride   `json:"limit,omitempty"`
}

type counterEntryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// counterOverride is a descriptor's limit override, as Envoy sends it.
type counterOverride struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
}

// countersReply is the reply of both routes: each descriptor of the
// request, in order, with its limits; keys_deleted only from a reset.
type countersReply struct {
	Domain      string                    `json:"domain"`
	Descriptors []descriptorCountersReply `json:"descriptors"`
	KeysDeleted *int                      `json:"keys_deleted,omitempty"`
}

type descriptorCountersReply struct {
	Entries    []counterEntryJSON  `json:"entries"`
	Limit      *counterOverride    `json:"limit,omitempty"`
	Matched    bool                `json:"matched"`
	Unlimited  bool                `json:"unlimited,omitempty"`
	ShadowMode bool                `json:"shadow_mode,omitempty"`
	Key        string              `json:"key,omitempty"`
	Limits     []limitCounterReply `json:"limits"`
}

// limitCounterReply is one limit; window and reset_after are in seconds
// (reset_after rounded up), remaining and reset_after only from a read.
type limitCounterReply struct {
	Name            string `json:"name,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit,omitempty"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
	Window          int64  `json:"window"`
	Algorithm       string `json:"algorithm"`
	AlwaysCount     bool   `json:"always_count,omitempty"`
	Remaining       *int64 `json:"remaining,omitempty"`
	ResetAfter      *int64 `json:"reset_after,omitempty"`
}

// handleCountersRead reads the counters of descriptors on the domain of the
// path.
func handleCountersRead(counters envoyCounters) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		domain, ds, err := parseCounters(w, r, counters)
		if err != nil {
			writeError(w, r, err)
			return
		}
		got, err := counters.ReadCounters(r.Context(), domain, ds)
		if err != nil {
			writeError(w, r, countersError(err))
			return
		}
		encode(w, r, http.StatusOK, newCountersReply(domain, ds, got, true))
	})
}

// handleCountersReset deletes the counters of descriptors on the domain of
// the path.
func handleCountersReset(counters envoyCounters) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		domain, ds, err := parseCounters(w, r, counters)
		if err != nil {
			writeError(w, r, err)
			return
		}
		got, n, err := counters.ResetCounters(r.Context(), domain, ds)
		if err != nil {
			writeError(w, r, countersError(err))
			return
		}
		logFrom(r.Context()).Info("envoy counters reset", "domain", domain, "descriptors", len(ds), "keys_deleted", n)
		reply := newCountersReply(domain, ds, got, false)
		reply.KeysDeleted = &n
		encode(w, r, http.StatusOK, reply)
	})
}

// parseCounters checks that the caller may act on the path's domain and
// reads the body.
func parseCounters(w http.ResponseWriter, r *http.Request, counters envoyCounters) (string, []envoycounters.Descriptor, error) {
	domain := r.PathValue("domain")
	if err := inputsize.String("domain", domain); err != nil {
		return "", nil, invalidField(err.Error()) // before it is looked up or written back
	}
	if err := authorizeCounters(r.Context(), counters, domain); err != nil {
		return "", nil, err
	}
	req, err := decode[countersRequest](w, r)
	if err != nil {
		return "", nil, err
	}
	if req.Descriptors == nil {
		return "", nil, missingField("descriptors is required: the descriptors whose counters to read or reset, as Envoy sends them")
	}
	ds := make([]envoycounters.Descriptor, len(req.Descriptors))
	for i, d := range req.Descriptors {
		ds[i].Entries = make([]envoycounters.Entry, len(d.Entries))
		for j, e := range d.Entries {
			ds[i].Entries[j] = envoycounters.Entry{Key: e.Key, Value: e.Value}
		}
		if o := d.Limit; o != nil {
			ds[i].Limit = &envoycounters.Override{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, UnitMultiplier: o.UnitMultiplier}
		}
	}
	return domain, ds, nil
}

// authorizeCounters lets the operator act on any domain, and a client only
// on its own domain when the client's rules, not the YAML, limit it.
func authorizeCounters(ctx context.Context, counters envoyCounters, domain string) error {
	if st := stateFrom(ctx); st != nil && st.operator {
		return nil
	}
	c := clientFrom(ctx)
	if c.Domain == "" {
		return fmt.Errorf("this API key's client has no Envoy domain (the operator grants them): it cannot read or reset the counters of domain %q: %w", domain, errForeignDomain)
	}
	if c.Domain != domain {
		return fmt.Errorf("this API key's domain is %q: it cannot read or reset the counters of domain %q: %w", c.Domain, domain, errForeignDomain)
	}
	if counters.DomainSource(domain) == envoycounters.YAML {
		return fmt.Errorf("domain %q is limited by the descriptor YAML, not by your rules: its counters need the operator key (ADMIN_API_KEY): %w", domain, errOperatorKeyRequired)
	}
	return nil
}

// countersError keeps the service's refusals and marks the rest as the
// backend's.
func countersError(err error) error {
	if errors.Is(err, envoycounters.ErrInvalid) || errors.Is(err, envoycounters.ErrNoLimits) {
		return err
	}
	return limiterError(err)
}

func newCountersReply(domain string, ds []envoycounters.Descriptor, got []envoycounters.Counters, read bool) countersReply {
	reply := countersReply{Domain: domain, Descriptors: make([]descriptorCountersReply, len(got))}
	for i, c := range got {
		d := descriptorCountersReply{Entries: make([]counterEntryJSON, len(ds[i].Entries)), Matched: c.Matched, Unlimited: c.Unlimited,
			ShadowMode: c.ShadowMode, Key: c.Key, Limits: make([]limitCounterReply, len(c.Limits))}
		for j, e := range ds[i].Entries {
			d.Entries[j] = counterEntryJSON{Key: e.Key, Value: e.Value}
		}
		if o := ds[i].Limit; o != nil {
			d.Limit = &counterOverride{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, UnitMultiplier: o.UnitMultiplier}
		}
		for j, l := range c.Limits {
			lr := limitCounterReply{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, UnitMultiplier: l.UnitMultiplier,
				Window: ceilSeconds(l.Window), Algorithm: l.Algorithm, AlwaysCount: l.AlwaysCount}
			if read {
				remaining, reset := l.Remaining, ceilSeconds(l.ResetAfter)
				lr.Remaining, lr.ResetAfter = &remaining, &reset
			}
			d.Limits[j] = lr
		}
		reply.Descriptors[i] = d
	}
	return reply
}

// authenticateCounters admits the operator key (AdminKey, compared in
// constant time; never a client's key) or a client's API key, as
// authenticate does. Only the counters routes take the operator key.
func authenticateCounters(cache *store.Cache, adminKey string) func(http.Handler) http.Handler {
	var admin [32]byte
	if adminKey != "" {
		admin = sha256.Sum256([]byte(adminKey))
	}
	return func(next http.Handler) http.Handler {
		asClient := authenticate(cache)(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := apiKey(r)
			if adminKey == "" || key == "" {
				asClient.ServeHTTP(w, r)
				return
			}
			got := sha256.Sum256([]byte(key))
			if subtle.ConstantTimeCompare(got[:], admin[:]) != 1 {
				asClient.ServeHTTP(w, r)
				return
			}
			st := stateFrom(r.Context())
			if st == nil { // served without withRequestID (tests of one handler)
				st = &requestState{log: slog.New(slog.DiscardHandler)}
				r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
			}
			st.operator = true
			st.log = st.log.With("operator", true)
			next.ServeHTTP(w, r)
		})
	}
}
