package restapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/store"
)

// Per-identifier overrides of a rule: another limit (and window) for one
// identifier, or for every identifier starting with a prefix ("acme*").
// A check through the rule takes the override that matches its identifier
// (exact beats a pattern, the longest prefix a shorter one) from the cache,
// and its reply names it; Envoy requests the rule matches take them too
// (keyed by the value of the descriptor's last entry).

// overrideRequest is the body of POST /rules/{name}/overrides.
type overrideRequest struct {
	Identifier string `json:"identifier"`
	Limit      *int64 `json:"limit"`
	Window     *int64 `json:"window"`
}

type overrideReply struct {
	Rule       string    `json:"rule"`
	Identifier string    `json:"identifier"`
	Limit      int64     `json:"limit"`
	Window     int64     `json:"window,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

func newOverrideReply(o store.Override) overrideReply {
	return overrideReply{Rule: o.Rule, Identifier: o.Identifier, Limit: o.Limit, Window: int64(o.Window / time.Second), CreatedAt: o.CreatedAt.UTC()}
}

// handleOverridePut creates (201) or replaces (200) the override of an
// identifier or pattern on one of the caller's rules.
func handleOverridePut(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule := r.PathValue("name")
		o, err := parseOverride(w, r, rule)
		if err != nil {
			writeError(w, r, err)
			return
		}
		o, created, err := db.PutOverride(r.Context(), o)
		if err != nil {
			writeError(w, r, overrideError(rule, err))
			return
		}
		refresh(r, cache)
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		encode(w, r, status, newOverrideReply(o))
	})
}

// parseOverride reads the body of POST /rules/{name}/overrides; the store
// checks the limit and window against the rule.
func parseOverride(w http.ResponseWriter, r *http.Request, rule string) (store.Override, error) {
	req, err := decodeIdentified(w, r, func(b overrideRequest) string { return b.Identifier })
	if err != nil {
		return store.Override{}, err
	}
	o := store.Override{ClientID: clientFrom(r.Context()).ID, Rule: rule, Identifier: req.Identifier}
	switch {
	case req.Limit == nil:
		return o, missingField("limit is required")
	case req.Window != nil && (*req.Window <= 0 || *req.Window > int64(366*24*60*60)):
		return o, invalidField("window must be a positive number of seconds, at most 366 days; leave it out for the rule's")
	}
	o.Limit = *req.Limit
	if req.Window != nil {
		o.Window = time.Duration(*req.Window) * time.Second
	}
	return o, nil
}

// overrideError maps the store's refusals of overrides (a client's quota is
// errorResponse's).
func overrideError(rule string, err error) error {
	var qe *store.QuotaError
	switch {
	case errors.As(err, &qe):
		return err
	case errors.Is(err, store.ErrNotFound):
		return &apiError{http.StatusNotFound, "RULE_NOT_FOUND", fmt.Sprintf("rule %q not found", rule)}
	case errors.Is(err, store.ErrTooMany):
		return &apiError{http.StatusConflict, "TOO_MANY_OVERRIDES", fmt.Sprintf("rule %q has %d overrides, the most a rule may have: delete some first", rule, store.MaxOverridesPerRule)}
	}
	return err
}

// handleOverrideList lists a rule's overrides by identifier.
func handleOverrideList(db *store.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule := r.PathValue("name")
		list, err := db.Overrides(r.Context(), clientFrom(r.Context()).ID, rule)
		if err != nil {
			writeError(w, r, overrideError(rule, err))
			return
		}
		reply := make([]overrideReply, 0, len(list))
		for _, o := range list {
			reply = append(reply, newOverrideReply(o))
		}
		encode(w, r, http.StatusOK, reply)
	})
}

// handleOverrideDelete removes one override; the identifier (or pattern,
// '*' included) is the rest of the path, URL-escaped.
func handleOverrideDelete(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule, id := r.PathValue("name"), r.PathValue("identifier")
		err := db.DeleteOverride(r.Context(), clientFrom(r.Context()).ID, rule, id)
		if errors.Is(err, store.ErrNotFound) {
			err = &apiError{http.StatusNotFound, "OVERRIDE_NOT_FOUND", fmt.Sprintf("rule %q has no override of %q", rule, id)}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusOK, deletedReply{Message: "Override removed successfully", Name: rule, Identifier: id})
	})
}
