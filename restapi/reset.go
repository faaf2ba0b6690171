package restapi

import (
	"net/http"

	"github.com/throttle-rl/throttle/algorithms"
)

// resetRequest is the body of POST /reset.
type resetRequest struct {
	Identifier string `json:"identifier"`
	Algorithm  string `json:"algorithm"`
}

type resetReply struct {
	Message     string `json:"message"`
	Identifier  string `json:"identifier"`
	KeysDeleted int    `json:"keys_deleted"`
}

// handleReset forgets the counters of one of the caller's identifiers: every
// limit on it, or only those of one algorithm. Other identifiers, and other
// clients' identical identifiers, are untouched. Its outstanding
// reservations go with its counters (a commit is 410 RESERVATION_RESET)
// and leave the cap.
func handleReset(limiter algorithms.Store, out *outstanding) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		req, err := decodeIdentified(w, r, func(b resetRequest) string { return b.Identifier })
		if err != nil {
			writeError(w, r, err)
			return
		}
		var alg algorithms.Algorithm
		if req.Algorithm != "" {
			if alg, err = algorithms.ParseAlgorithm(req.Algorithm); err != nil {
				writeError(w, r, invalidField("algorithm must be "+algorithms.Names()))
				return
			}
		}
		n, err := limiter.Reset(r.Context(), algorithms.ClientScope(c.ID), req.Identifier, alg)
		if err != nil {
			writeError(w, r, limiterError(err))
			return
		}
		out.releaseReset(r.Context(), c, req.Identifier, alg)
		encode(w, r, http.StatusOK, resetReply{Message: "Identifier reset successfully", Identifier: req.Identifier, KeysDeleted: n})
	})
}
