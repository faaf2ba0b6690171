package restapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/throttle-rl/throttle/store"
)

// maxBatchChecks is the most checks one POST /check/batch takes.
const maxBatchChecks = 100

// batchRequest is the body of POST /check/batch: 1 to maxBatchChecks
// checks, each a /check body.
type batchRequest struct {
	Checks []checkRequest `json:"checks"`
}

// batchReply is its reply: every check's reply, in order, and whether all
// were allowed.
type batchReply struct {
	Allowed bool         `json:"allowed"`
	Results []checkReply `json:"results"`
}

// handleCheckBatch decides several checks at once, all or nothing: when any
// is refused, none is counted (an always_count rule's hits excepted). Each
// check names its own identifier, rule or inline limit; exempt identifiers
// are allowed and never refuse the others. The rate-limit headers describe
// the most restrictive check (mostRestrictive).
func handleCheckBatch(d checkDeps, m *metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		checks, err := parseBatch(w, r, d, c)
		if err != nil {
			writeError(w, r, err)
			return
		}
		got, err := decideChecks(r.Context(), d, m, c, checks)
		if err != nil {
			writeError(w, r, err)
			return
		}
		reply := batchReply{Allowed: true, Results: make([]checkReply, len(got))}
		for i, o := range got {
			reply.Results[i] = o.reply
			reply.Allowed = reply.Allowed && o.reply.Allowed
		}
		setCheckHeaders(w.Header(), d.HeaderSets, got[mostRestrictive(got)])
		encode(w, r, http.StatusOK, reply)
	})
}

// parseBatch reads and checks a batch; an error names the first bad check
// by its index ("checks[3]: …").
func parseBatch(w http.ResponseWriter, r *http.Request, d checkDeps, c store.Client) ([]check, error) {
	req, err := decode[batchRequest](w, r)
	if err != nil {
		return nil, err
	}
	if n := len(req.Checks); n == 0 || n > maxBatchChecks {
		if req.Checks == nil {
			return nil, missingField(fmt.Sprintf("checks is required: a list of 1 to %d /check bodies", maxBatchChecks))
		}
		return nil, invalidField(fmt.Sprintf("checks has %d checks; send 1 to %d", n, maxBatchChecks))
	}
	checks := make([]check, len(req.Checks))
	for i, cr := range req.Checks {
		if checks[i], err = newCheck(r, d, c, cr, false); err != nil {
			return nil, withPrefix(fmt.Sprintf("checks[%d]: ", i), err)
		}
	}
	return checks, nil
}

// mostRestrictive is the index of the check whose headers a batch reply
// carries: of the refused ones, the one that passes last (the longest
// retry_after); else the one with the least remaining of those counted
// (not exempt); the first of equals.
func mostRestrictive(got []decided) int {
	best := -1
	rank := func(o decided) (bool, int64) { // refused first; then longer retry, less remaining
		if !o.reply.Allowed {
			return true, o.reply.RetryAfter
		}
		return false, -o.reply.Remaining
	}
	for i, o := range got {
		if o.reply.Exempted {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		br, bv := rank(got[best])
		or, ov := rank(o)
		if (or && !br) || (or == br && ov > bv) {
			best = i
		}
	}
	return max(best, 0)
}

// withPrefix puts prefix before the message of a client error (it keeps
// its status and code); other errors are wrapped.
func withPrefix(prefix string, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return &apiError{ae.status, ae.code, prefix + ae.message}
	}
	return fmt.Errorf("%s%w", prefix, err)
}
