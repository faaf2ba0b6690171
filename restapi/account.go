package restapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

type meReply struct {
	ClientID         string    `json:"client_id"`
	Name             string    `json:"name"`
	Email            string    `json:"email"`
	Domain           string    `json:"domain"`
	DefaultAlgorithm string    `json:"default_algorithm"`
	CreatedAt        time.Time `json:"created_at"`
}

// handleMe says who the API key belongs to (never the key itself).
func handleMe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		encode(w, r, http.StatusOK, meReply{
			ClientID:         c.ID,
			Name:             c.Name,
			Email:            c.Email,
			Domain:           c.Domain,
			DefaultAlgorithm: string(c.DefaultAlgorithm),
			CreatedAt:        c.CreatedAt.UTC(),
		})
	})
}

// usageReply is GET /stats/{client_id}: a client's usage (its decisions), not
// the metrics (/metrics, the debug port's /stats) nor the reference's stats
// sink.
type usageReply struct {
	ClientID       string            `json:"client_id"`
	TotalChecks    int64             `json:"total_checks"`
	Allowed        int64             `json:"allowed"`
	Rejected       int64             `json:"rejected"`
	ByAlgorithm    map[string]int64  `json:"by_algorithm"`
	TopIdentifiers []identifierUsage `json:"top_identifiers"`
	// Reservations: absent when the counters could not be read.
	Reservations *reservationUsage `json:"reservations,omitempty"`
}

// identifierUsage is one identifier's /check counts.
type identifierUsage struct {
	Identifier  string    `json:"identifier"`
	TotalChecks int64     `json:"total_checks"`
	Allowed     int64     `json:"allowed"`
	Rejected    int64     `json:"rejected"`
	LastSeenAt  time.Time `json:"last_seen_at"`
}

// defaultTopIdentifiers is how many identifiers /stats/{client_id} lists
// without ?top=.
const defaultTopIdentifiers = 10

// handleUsage is GET /stats/{client_id}, a client's usage: the caller's
// /check counts, and its most checked identifiers (?top=N, 0 to
// store.MaxTopIdentifiers, default 10). A key may only read its own
// client's usage: any other client id is 403. With them, its outstanding
// reservations and the quota they hold on each counter.
func handleUsage(usage *store.UsageRecorder, limiter algorithms.Store, out *outstanding) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		if r.PathValue("client_id") != c.ID {
			writeError(w, r, &apiError{http.StatusForbidden, "FORBIDDEN", "an API key can only read its own client's stats"})
			return
		}
		n := defaultTopIdentifiers
		if q := r.URL.Query(); q.Has("top") {
			v, err := strconv.Atoi(q.Get("top"))
			if err != nil || v < 0 || v > store.MaxTopIdentifiers {
				writeError(w, r, invalidField(fmt.Sprintf("top must be a whole number between 0 and %d", store.MaxTopIdentifiers)))
				return
			}
			n = v
		}
		u, err := usage.Usage(r.Context(), c.ID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		idents, err := usage.TopIdentifiers(r.Context(), c.ID, n)
		if err != nil {
			writeError(w, r, err)
			return
		}
		top := make([]identifierUsage, 0, len(idents))
		for _, id := range idents {
			top = append(top, identifierUsage{
				Identifier: id.Identifier, TotalChecks: id.Total(), Allowed: id.Allowed, Rejected: id.Rejected,
				LastSeenAt: id.LastSeen.UTC(),
			})
		}
		by := make(map[string]int64, len(algorithms.Algorithms))
		for _, a := range algorithms.Algorithms {
			by[string(a)] = u.ByAlgorithm[string(a)]
		}
		encode(w, r, http.StatusOK, usageReply{
			ClientID:       c.ID,
			TotalChecks:    u.TotalChecks,
			Allowed:        u.Allowed,
			Rejected:       u.Rejected,
			ByAlgorithm:    by,
			TopIdentifiers: top,
			Reservations:   readReservationUsage(r.Context(), limiter, out, c),
		})
	})
}
