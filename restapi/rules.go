package restapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// ruleRequest is the body of POST /rules and PUT /rules/{name}. A rule has
// one limit (algorithm, limit, window, refill_rate, always_count, accuracy,
// scope) or, with descriptors, several as a list (rate_limits), never both.
type ruleRequest struct {
	Name        string                  `json:"name"`
	Algorithm   string                  `json:"algorithm"`
	Limit       *int64                  `json:"limit"`
	Window      *int64                  `json:"window"`
	RefillRate  *float64                `json:"refill_rate"`
	AlwaysCount *bool                   `json:"always_count"`
	Accuracy    string                  `json:"accuracy"`
	Scope       string                  `json:"scope"`
	RateLimits  []ruleLimitRequest      `json:"rate_limits"`
	Descriptors []store.DescriptorEntry `json:"descriptors"`
	Reserve     *reserveJSON            `json:"reserve"`
}

// reserveJSON is a rule's reserve: hits held on Envoy's request path, for
// ttl seconds, under the value of the descriptor entry keyed handle
// (docs/envoy-ai-gateway-reservations.md).
type reserveJSON struct {
	Hits   int64  `json:"hits"`
	TTL    int64  `json:"ttl"`
	Handle string `json:"handle"`
}

// ruleLimitRequest is one limit of a rule's rate_limits.
type ruleLimitRequest struct {
	Name        string   `json:"name"`
	Algorithm   string   `json:"algorithm"`
	Limit       *int64   `json:"limit"`
	Window      *int64   `json:"window"`
	RefillRate  *float64 `json:"refill_rate"`
	AlwaysCount bool     `json:"always_count"`
	Accuracy    string   `json:"accuracy"`
	Scope       string   `json:"scope"`
}

// ruleReply is a rule as the API shows it. Window is in seconds; accuracy
// and scope are always shown ("exact" or "approximate"; "regional" or
// "global"). A rule of several limits shows them in rate_limits, and no
// algorithm, limit, window, accuracy or scope of its own.
type ruleReply struct {
	Name        string                  `json:"name"`
	Algorithm   string                  `json:"algorithm,omitempty"`
	Limit       int64                   `json:"limit,omitempty"`
	Window      *int64                  `json:"window,omitempty"`
	RefillRate  float64                 `json:"refill_rate,omitempty"`
	AlwaysCount bool                    `json:"always_count,omitempty"`
	Accuracy    string                  `json:"accuracy,omitempty"`
	Scope       string                  `json:"scope,omitempty"`
	RateLimits  []ruleLimitReply        `json:"rate_limits,omitempty"`
	Descriptors []store.DescriptorEntry `json:"descriptors,omitempty"`
	Reserve     *reserveJSON            `json:"reserve,omitempty"`
	CreatedAt   time.Time               `json:"created_at"`
}

// ruleLimitReply is one limit of a rule's rate_limits.
type ruleLimitReply struct {
	Name        string  `json:"name,omitempty"`
	Algorithm   string  `json:"algorithm"`
	Limit       int64   `json:"limit"`
	Window      int64   `json:"window"`
	RefillRate  float64 `json:"refill_rate,omitempty"`
	AlwaysCount bool    `json:"always_count,omitempty"`
	Accuracy    string  `json:"accuracy"`
	Scope       string  `json:"scope"`
}

func newRuleReply(r store.Rule) ruleReply {
	reply := ruleReply{Name: r.Name, Descriptors: r.Descriptors, CreatedAt: r.CreatedAt.UTC()}
	if v := r.Reserve; v != nil {
		reply.Reserve = &reserveJSON{Hits: v.Hits, TTL: int64(v.TTL / time.Second), Handle: v.Handle}
	}
	if len(r.RateLimits) == 0 {
		w := int64(r.Limit.Window / time.Second)
		reply.Algorithm, reply.Limit, reply.Window = string(r.Limit.Algorithm), r.Limit.Limit, &w
		reply.RefillRate, reply.AlwaysCount, reply.Accuracy = r.Limit.RefillRate, r.AlwaysCount, r.Limit.Accuracy.String()
		reply.Scope = r.Limit.ScopeName()
		return reply
	}
	reply.RateLimits = make([]ruleLimitReply, len(r.RateLimits))
	for i, l := range r.RateLimits {
		reply.RateLimits[i] = ruleLimitReply{Name: l.Name, Algorithm: string(l.Limit.Algorithm), Limit: l.Limit.Limit,
			Window: int64(l.Limit.Window / time.Second), RefillRate: l.Limit.RefillRate, AlwaysCount: l.AlwaysCount, Accuracy: l.Limit.Accuracy.String(),
			Scope: l.Limit.ScopeName()}
	}
	return reply
}

// handleRuleCreate creates a rule of the caller's client. The algorithm
// defaults to the client's default algorithm.
func handleRuleCreate(db *store.DB, cache *store.Cache, opts ruleOptions) http.Handler {
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
		rule, err := ruleFromRequest(clientFrom(r.Context()), req, opts)
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
func handleRuleUpdate(db *store.DB, cache *store.Cache, opts ruleOptions) http.Handler {
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
		rule, err := ruleFromRequest(clientFrom(r.Context()), req, opts)
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

// ruleOptions are what a rule body is checked against: maxTTL bounds its
// reserve.ttl (MAX_RESERVATION_TTL); globalScope says whether a limit may
// be of scope global (GLOBAL_REDIS_URL).
type ruleOptions struct {
	maxTTL      time.Duration
	globalScope bool
}

// ruleFromRequest checks a POST /rules or PUT /rules/{name} body and turns
// it into the rule to store for client c.
func ruleFromRequest(c store.Client, req ruleRequest, opts ruleOptions) (store.Rule, error) {
	rule := store.Rule{ClientID: c.ID, Name: req.Name, Descriptors: req.Descriptors}
	if v := req.Reserve; v != nil {
		if v.TTL < 1 || time.Duration(v.TTL) > opts.maxTTL/time.Second {
			return store.Rule{}, invalidField(fmt.Sprintf("reserve.ttl %d must be between 1 and %d seconds (MAX_RESERVATION_TTL)", v.TTL, int64(opts.maxTTL/time.Second)))
		}
		rule.Reserve = &store.RuleReserve{Hits: v.Hits, TTL: time.Duration(v.TTL) * time.Second, Handle: v.Handle}
	}
	if req.RateLimits != nil {
		if req.Algorithm != "" || req.Limit != nil || req.Window != nil || req.RefillRate != nil || req.AlwaysCount != nil || req.Accuracy != "" || req.Scope != "" {
			return store.Rule{}, invalidField("give the rule's limit either in algorithm, limit, window, refill_rate, always_count, accuracy and scope, or as a list in rate_limits, not both")
		}
		if len(req.RateLimits) == 0 {
			return store.Rule{}, invalidField("rate_limits must list at least one limit")
		}
		for i, l := range req.RateLimits {
			limit, err := ruleLimit(c, l.Algorithm, l.Accuracy, l.Scope, l.Limit, l.Window, l.RefillRate, opts.globalScope)
			if err != nil {
				var ae *apiError
				if errors.As(err, &ae) {
					err = &apiError{ae.status, ae.code, fmt.Sprintf("rate_limits[%d]: %s", i, ae.message)}
				}
				return store.Rule{}, err
			}
			rule.RateLimits = append(rule.RateLimits, store.RuleLimit{Name: l.Name, Limit: limit, AlwaysCount: l.AlwaysCount})
		}
		return rule, nil
	}
	limit, err := ruleLimit(c, req.Algorithm, req.Accuracy, req.Scope, req.Limit, req.Window, req.RefillRate, opts.globalScope)
	if err != nil {
		return store.Rule{}, err
	}
	rule.Limit, rule.AlwaysCount = limit, req.AlwaysCount != nil && *req.AlwaysCount
	return rule, nil
}

// ruleLimit checks one limit of a rule body; the algorithm defaults to the
// client's, the scope to regional, the accuracy to exact (approximate for
// scope global, which refuses exact written out). globalScope says whether
// the server keeps global limits.
func ruleLimit(c store.Client, alg, accuracy, scope string, limit, window *int64, refill *float64, globalScope bool) (algorithms.Limit, error) {
	if alg == "" {
		alg = string(c.DefaultAlgorithm)
	}
	a, err := algorithms.ParseAlgorithm(alg)
	if err != nil {
		return algorithms.Limit{}, invalidField("algorithm must be " + algorithms.Names())
	}
	acc, err := algorithms.ParseAccuracy(accuracy)
	if err != nil {
		return algorithms.Limit{}, invalidField(err.Error())
	}
	global, err := algorithms.ParseScope(scope)
	if err != nil {
		return algorithms.Limit{}, invalidField(err.Error())
	}
	if global && !globalScope {
		return algorithms.Limit{}, errGlobalScopeUnavailable
	}
	if global && accuracy == "" {
		acc = algorithms.Approximate // what global means
	}
	return inlineLimit(algorithms.Limit{Algorithm: a, Accuracy: acc, Global: global}, limit, window, refill)
}

// errGlobalScopeUnavailable refuses a limit of scope global on a server
// without a global Redis.
var errGlobalScopeUnavailable = &apiError{http.StatusBadRequest, "GLOBAL_SCOPE_UNAVAILABLE",
	`scope "global" needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none): leave scope out for a regional limit, or ask the operator for a global Redis`}

// ruleError maps the store's rule errors that both create and update share.
func ruleError(err error) error {
	if errors.Is(err, store.ErrDuplicateDescriptors) {
		return &apiError{http.StatusConflict, "DESCRIPTORS_EXIST", "another rule already has these descriptors: an Envoy request must match one rule"}
	}
	return err
}

// handleRuleList lists the caller's rules by name; [] when there are none,
// or {"rules": […]} with asObject.
func handleRuleList(db *store.DB, asObject bool) http.Handler {
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
		encodeList(w, r, asObject, "rules", reply)
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
