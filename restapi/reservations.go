package restapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// Reservations: a /check with reserve_ttl holds its admitted hits as a
// hold of the engine (algorithms.Hold) until it is committed (POST
// /reservations/{id}/commit), cancelled (DELETE /reservations/{id}) or it
// expires. The reservation id is the hold's address: the client it
// belongs to, the counter (identifier, counter name and limit) and a
// random hold id of 128 bits, base64url-encoded JSON. It is not secret
// from its client; what makes it safe is that a settle acts only within
// the caller's own client (an id of another client, or one edited, names
// no hold of the caller's and is 404), and the random part cannot be
// guessed.

// Defaults of the reservation settings (Deps.Reservations).
const (
	DefaultReservationMaxFraction       = 0.5
	DefaultReservationMaxOutstanding    = 1000
	maxReservationIDLen                 = 2048
	reservationErrorCodeNotFound        = "RESERVATION_NOT_FOUND"
	reservationErrorCodeSettled         = "RESERVATION_SETTLED"
	reservationErrorCodeExpired         = "RESERVATION_EXPIRED"
	reservationErrorCodeReset           = "RESERVATION_RESET"
	reservationErrorCodeTooManyReserved = "TOO_MANY_RESERVATIONS"
)

// ReservationLimits bounds reservations (settings MAX_RESERVATION_TTL,
// RESERVATION_MAX_FRACTION, RESERVATION_MAX_OUTSTANDING_PER_CLIENT).
type ReservationLimits struct {
	// MaxTTL is the longest reserve_ttl. Default algorithms.DefaultMaxHoldTTL.
	MaxTTL time.Duration
	// MaxFraction is the largest share of its limit one reservation may
	// hold, (0, 1]. Default DefaultReservationMaxFraction.
	MaxFraction float64
	// MaxOutstanding is how many unsettled, unexpired reservations one
	// client may have, on every replica together when Ledger is shared.
	// Default DefaultReservationMaxOutstanding.
	MaxOutstanding int
	// Ledger keeps each client's outstanding reservations. Optional:
	// default, this replica's memory (the cap then counts per replica).
	Ledger ReservationLedger
}

func (l *ReservationLimits) setDefaults() {
	if l.MaxTTL <= 0 {
		l.MaxTTL = algorithms.DefaultMaxHoldTTL
	}
	if !(l.MaxFraction > 0 && l.MaxFraction <= 1) {
		l.MaxFraction = DefaultReservationMaxFraction
	}
	if l.MaxOutstanding <= 0 {
		l.MaxOutstanding = DefaultReservationMaxOutstanding
	}
}

// reservationToken is what a reservation id encodes.
type reservationToken struct {
	Client     string  `json:"c"`
	Identifier string  `json:"i"`
	Counter    string  `json:"n,omitempty"`
	Algorithm  string  `json:"a"`
	Limit      int64   `json:"l"`
	WindowMS   int64   `json:"w,omitempty"`
	Refill     float64 `json:"r,omitempty"`
	Accuracy   string  `json:"x,omitempty"`
	// Global is the limit's scope, so the hold settles where it was made
	// (the global Redis).
	Global bool   `json:"g,omitempty"`
	Hold   string `json:"h"`
}

// newHoldID is a random hold id: 128 bits, hex.
func newHoldID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// reservationID is the id of the hold holdID of ch, client c's.
func reservationID(c store.Client, ch check, holdID string) string {
	l := ch.limit
	tok := reservationToken{
		Client: c.ID, Identifier: ch.identifier, Counter: ch.counter, Algorithm: string(l.Algorithm),
		Limit: l.Limit, WindowMS: l.Window.Milliseconds(), Refill: l.RefillRate, Accuracy: string(l.Accuracy), Global: l.Global, Hold: holdID,
	}
	return tok.id()
}

// id is the reservation id of tok: the one form the ledger knows it by,
// however a client spelled the id it settles.
func (tok reservationToken) id() string {
	b, _ := json.Marshal(tok) // a struct of strings and numbers
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeReservationID returns the token of id, or false when id is
// malformed or none of client c's.
func decodeReservationID(c store.Client, id string) (reservationToken, bool) {
	var tok reservationToken
	if len(id) > maxReservationIDLen {
		return tok, false
	}
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || json.Unmarshal(b, &tok) != nil || tok.Client != c.ID || tok.Hold == "" {
		return tok, false
	}
	return tok, true
}

// settleOf is the settle request of tok's hold.
func (tok reservationToken) settleOf() (algorithms.Settle, bool) {
	req := algorithms.Request{
		Key: algorithms.Key{Scope: algorithms.ClientScope(tok.Client), Identifier: tok.Identifier, Name: tok.Counter},
		Limit: algorithms.Limit{Algorithm: algorithms.Algorithm(tok.Algorithm), Limit: tok.Limit,
			Window: time.Duration(tok.WindowMS) * time.Millisecond, RefillRate: tok.Refill, Accuracy: algorithms.Accuracy(tok.Accuracy),
			Global: tok.Global},
	}
	if req.Validate() != nil {
		return algorithms.Settle{}, false
	}
	return algorithms.Settle{Request: req, ID: tok.Hold}, true
}

// parseReservationID returns the settle request of id for client c, and
// the id the ledger knows it by; an id that is malformed, or another
// client's, is RESERVATION_NOT_FOUND.
func parseReservationID(c store.Client, id string) (algorithms.Settle, string, error) {
	notFound := &apiError{http.StatusNotFound, reservationErrorCodeNotFound, "no reservation of yours has this id"}
	tok, ok := decodeReservationID(c, id)
	if !ok {
		return algorithms.Settle{}, "", notFound
	}
	st, ok := tok.settleOf()
	if !ok {
		return algorithms.Settle{}, "", notFound
	}
	return st, tok.id(), nil
}

// checkReservation checks a reserve_ttl of seconds for ch: the hits held
// must be above 0 and at most lim.MaxFraction of the limit, the TTL above
// 0 and at most lim.MaxTTL.
func checkReservation(ch *check, seconds float64, lim ReservationLimits) error {
	ttl := time.Duration(seconds * float64(time.Second))
	switch {
	case !(seconds > 0) || ttl <= 0:
		return invalidField("reserve_ttl must be a number of seconds above 0")
	case ttl > lim.MaxTTL:
		return invalidField(fmt.Sprintf("reserve_ttl %gs is longer than %s, the longest a reservation lasts (MAX_RESERVATION_TTL)", seconds, lim.MaxTTL))
	case ch.hits <= 0:
		return invalidField("a reservation holds hits: hits must be 1 or more with reserve_ttl")
	case float64(ch.hits) > lim.MaxFraction*float64(ch.limit.Limit):
		return invalidField(fmt.Sprintf("a reservation of %d hits is more than %g of the limit %d (RESERVATION_MAX_FRACTION)", ch.hits, lim.MaxFraction, ch.limit.Limit))
	}
	ch.reserveTTL = ttl
	return nil
}

// commitRequest is the body of POST /reservations/{id}/commit.
type commitRequest struct {
	Hits *int64 `json:"hits"`
}

// settleReply is the reply of a commit or a cancel: what the reservation
// held and what was committed, and the counter's state after.
type settleReply struct {
	Identifier string `json:"identifier"`
	Algorithm  string `json:"algorithm"`
	Held       int64  `json:"held"`
	Committed  int64  `json:"committed"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	ResetAt    int64  `json:"reset_at"`
}

// handleReservationSettle commits (cancel false) or cancels the
// reservation of the path's id.
func handleReservationSettle(limiter algorithms.Store, out *outstanding, m *metrics, cancel bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		st, id, err := parseReservationID(c, r.PathValue("id"))
		if err == nil && !cancel {
			st.Request.Hits, err = parseCommit(w, r)
		}
		st.Cancel = cancel
		if err != nil {
			writeError(w, r, err)
			return
		}
		rs, err := limiter.Settle(r.Context(), []algorithms.Settle{st})
		if err == nil && len(rs) != 1 {
			err = fmt.Errorf("limiter returned %d results for 1 settle", len(rs))
		}
		if err != nil {
			writeError(w, r, limiterError(err))
			return
		}
		out.release(r.Context(), c.ID, id)
		res := rs[0]
		if err := settleError(res.Outcome); err != nil {
			m.reservations.WithLabelValues(outcomeName(res.Outcome)).Inc()
			writeError(w, r, err)
			return
		}
		outcome := "committed"
		if cancel {
			outcome = "cancelled"
		}
		m.reservations.WithLabelValues(outcome).Inc()
		d := res.Decision
		encode(w, r, http.StatusOK, settleReply{
			Identifier: st.Request.Key.Identifier, Algorithm: string(st.Request.Limit.Algorithm),
			Held: res.Held, Committed: st.Committed(), Limit: st.Request.Limit.Limit, Remaining: d.Remaining, ResetAt: ceilUnix(d.ResetAt()),
		})
	})
}

// parseCommit reads a commit's body: hits, 0 or more, required.
func parseCommit(w http.ResponseWriter, r *http.Request) (int64, error) {
	req, err := decode[commitRequest](w, r)
	switch {
	case err != nil:
		return 0, err
	case req.Hits == nil:
		return 0, missingField("hits is required: what the reservation really used, 0 or more")
	case *req.Hits < 0 || *req.Hits > algorithms.MaxLimit:
		return 0, invalidField(fmt.Sprintf("hits must be between 0 and %d", int64(algorithms.MaxLimit)))
	}
	return *req.Hits, nil
}

// settleError is the error reply of a settle's outcome; nil when settled.
func settleError(o algorithms.SettleOutcome) error {
	switch o {
	case algorithms.Settled:
		return nil
	case algorithms.AlreadySettled:
		return &apiError{http.StatusConflict, reservationErrorCodeSettled, "the reservation was committed or cancelled already; nothing changed"}
	case algorithms.Expired:
		return &apiError{http.StatusGone, reservationErrorCodeExpired, "the reservation expired before it was settled and gave its hits back; nothing was counted"}
	case algorithms.Cleared:
		return &apiError{http.StatusGone, reservationErrorCodeReset, "the reservation's counter was reset after it was made: its hits went with the counter, and nothing was counted into the fresh one"}
	}
	return &apiError{http.StatusNotFound, reservationErrorCodeNotFound, "no reservation of yours has this id (never made, or forgotten after its window)"}
}

// outcomeName names a settle's outcome in the metrics.
func outcomeName(o algorithms.SettleOutcome) string {
	switch o {
	case algorithms.AlreadySettled:
		return "already_settled"
	case algorithms.Expired:
		return "expired"
	case algorithms.Cleared:
		return "reset"
	}
	return "not_found"
}
