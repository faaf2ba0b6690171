package restapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/store"
)

// exemptionRequest is the body of POST /exemptions.
type exemptionRequest struct {
	Identifier string `json:"identifier"`
	Reason     string `json:"reason"`
}

type exemptionReply struct {
	Identifier string    `json:"identifier"`
	Reason     string    `json:"reason"`
	CreatedAt  time.Time `json:"created_at"`
}

func newExemptionReply(e store.Exemption) exemptionReply {
	return exemptionReply{Identifier: e.Identifier, Reason: e.Reason, CreatedAt: e.CreatedAt.UTC()}
}

// handleExemptionCreate exempts one of the caller's identifiers from rate
// limiting: /check allows it without counting.
func handleExemptionCreate(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		req, err := decodeIdentified(w, r, func(b exemptionRequest) string { return b.Identifier })
		if err != nil {
			writeError(w, r, err)
			return
		}
		e, err := db.CreateExemption(r.Context(), store.Exemption{ClientID: c.ID, Identifier: req.Identifier, Reason: req.Reason})
		if errors.Is(err, store.ErrConflict) {
			err = &apiError{http.StatusConflict, "EXEMPTION_EXISTS", fmt.Sprintf("identifier %q is already exempt", req.Identifier)}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusCreated, newExemptionReply(e))
	})
}

// handleExemptionList lists the caller's exemptions by identifier; [] when
// there are none, or {"exemptions": […]} with asObject.
func handleExemptionList(db *store.DB, asObject bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list, err := db.Exemptions(r.Context(), clientFrom(r.Context()).ID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		reply := make([]exemptionReply, 0, len(list))
		for _, e := range list {
			reply = append(reply, newExemptionReply(e))
		}
		encodeList(w, r, asObject, "exemptions", reply)
	})
}

// handleExemptionDelete removes one of the caller's exemptions. The
// identifier is the rest of the path, so it may contain '/' (send it as
// %2F or as is).
func handleExemptionDelete(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("identifier")
		err := db.DeleteExemption(r.Context(), clientFrom(r.Context()).ID, id)
		if errors.Is(err, store.ErrNotFound) {
			err = &apiError{http.StatusNotFound, "EXEMPTION_NOT_FOUND", fmt.Sprintf("identifier %q is not exempt", id)}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusOK, deletedReply{Message: "Exemption removed successfully", Identifier: id})
	})
}
