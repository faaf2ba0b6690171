package restapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// ruleRequest is the body of POST /rules and PUT /rules/{name}.
type ruleRequest struct {
	Name        string                  `json:"name"`
	Algorithm   string                  `json:"algorithm"`
	Limit       *int64                  `json:"limit"`
	Window      *int64                  `json:"window"`
	RefillRate  *float64                `json:"refill_rate"`
	Descriptors []store.DescriptorEntry `json:"descriptors"`
}

// ruleReply is a rule as the API shows it. Window is in seconds.
type ruleReply struct {
	Name        string                  `json:"name"`
	Algorithm   string                  `json:"algorithm"`
	Limit       int64                   `json:"limit"`
	Window      int64                   `json:"window"`
	RefillRate  float64                 `json:"refill_rate,omitempty"`
	Descriptors []store.DescriptorEntry `json:"descriptors,omitempty"`
	CreatedAt   time.Time               `json:"created_at"`
}

func newRuleReply(r store.Rule) ruleReply {
	return ruleReply{
		Name:        r.Name,
		Algorithm:   string(r.Limit.Algorithm),
		Limit:       r.Limit.Limit,
		Window:      int64(r.Limit.Window / time.Second),
		RefillRate:  r.Limit.RefillRate,
		Descriptors: r.Descriptors,
		CreatedAt:   r.CreatedAt.UTC(),
	}
}

// handleRuleCreate creates a rule of the caller's client. The algorithm
// defaults to the client's default algorithm.
func handleRuleCreate(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[ruleRequest](w, r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if req.Name == "" {
			writeError(w, r, missingField("name is required"))
			return
		}
		rule, err := ruleFromRequest(clientFrom(r.Context()), req)
		if err == nil {
			rule, err = db.CreateRule(r.Context(), rule)
		}
		if errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrDuplicateDescriptors) {
			err = &apiError{http.StatusConflict, "RULE_EXISTS", fmt.Sprintf("rule %q already exists", req.Name)}
		}
		if err != nil {
			writeError(w, r, ruleError(err))
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusCreated, newRuleReply(rule))
	})
}

// handleRuleUpdate replaces one of the caller's rules: the body is that of
// POST /rules, and every field it leaves out takes its default, as on
// create. The name cannot change (a body naming another is 400); the
// creation time is kept.
func handleRuleUpdate(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		req, err := decode[ruleRequest](w, r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if req.Name != "" && req.Name != name {
			writeError(w, r, invalidField(fmt.Sprintf("name %q differs from the rule's name %q in the path: a rule cannot be renamed (create the new one, then delete the old)", req.Name, name)))
			return
		}
		req.Name = name
		rule, err := ruleFromRequest(clientFrom(r.Context()), req)
		if err == nil {
			rule, err = db.UpdateRule(r.Context(), rule)
		}
		if errors.Is(err, store.ErrNotFound) {
			err = &apiError{http.StatusNotFound, "RULE_NOT_FOUND", fmt.Sprintf("rule %q not found", name)}
		}
		if err != nil {
			writeError(w, r, ruleError(err))
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusOK, newRuleReply(rule))
	})
}

// ruleFromRequest checks a POST /rules or PUT /rules/{name} body and turns
// it into the rule to store for client c.
func ruleFromRequest(c store.Client, req ruleRequest) (store.Rule, error) {
	name := req.Algorithm
	if name == "" {
		name = string(c.DefaultAlgorithm)
	}
	alg, err := algorithms.ParseAlgorithm(name)
	if err != nil {
		return store.Rule{}, invalidField("algorithm must be " + algorithms.Names())
	}
	limit, err := inlineLimit(alg, req.Limit, req.Window, req.RefillRate)
	if err != nil {
		return store.Rule{}, err
	}
	return store.Rule{ClientID: c.ID, Name: req.Name, Limit: limit, Descriptors: req.Descriptors}, nil
}

// ruleError maps the store's rule errors that both create and update share.
func ruleError(err error) error {
	if errors.Is(err, store.ErrDuplicateDescriptors) {
		return &apiError{http.StatusConflict, "DESCRIPTORS_EXIST", "another rule already has these descriptors: an Envoy request must match one rule"}
	}
	return err
}

// handleRuleList lists the caller's rules by name; [] when there are none.
func handleRuleList(db *store.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rules, err := db.Rules(r.Context(), clientFrom(r.Context()).ID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		reply := make([]ruleReply, 0, len(rules))
		for _, rule := range rules {
			reply = append(reply, newRuleReply(rule))
		}
		encode(w, r, http.StatusOK, reply)
	})
}

type deletedReply struct {
	Message    string `json:"message"`
	Name       string `json:"name,omitempty"`
	Identifier string `json:"identifier,omitempty"`
}

// handleRuleDelete deletes one of the caller's rules. Its counters are left
// to expire with their window.
func handleRuleDelete(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		err := db.DeleteRule(r.Context(), clientFrom(r.Context()).ID, name)
		if errors.Is(err, store.ErrNotFound) {
			err = &apiError{http.StatusNotFound, "RULE_NOT_FOUND", fmt.Sprintf("rule %q not found", name)}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusOK, deletedReply{Message: "Rule deleted successfully", Name: name})
	})
}
