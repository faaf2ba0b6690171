package restapi

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-rl/throttle/store"
)

// keyRequest is the body of POST /keys.
type keyRequest struct {
	Scope string `json:"scope"`
}

// keyReply is a minted key; APIKey, the secret, only in the reply to
// POST /keys (it is stored hashed).
type keyReply struct {
	ID        string    `json:"id"`
	Scope     string    `json:"scope"`
	APIKey    string    `json:"api_key,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

type keyDeletedReply struct {
	Message string `json:"message"`
	ID      string `json:"id"`
}

func newKeyReply(k store.Key) keyReply {
	return keyReply{ID: k.ID, Scope: k.Scope, CreatedAt: k.CreatedAt.UTC()}
}

// handleKeyCreate mints a key of the caller's client with a scope: a
// "check" key may only call /check, /check/ip and /check/batch, so it can
// be embedded in a browser app. The secret is in this reply only.
func handleKeyCreate(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decode[keyRequest](w, r)
		if err == nil && req.Scope != store.ScopeCheck {
			err = &apiError{http.StatusBadRequest, "INVALID_SCOPE", fmt.Sprintf("scope must be %q (a key that may only check)", store.ScopeCheck)}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		secret := newAPIKey()
		k, err := db.CreateKey(r.Context(), clientFrom(r.Context()).ID, req.Scope, sha256.Sum256([]byte(secret)))
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		reply := newKeyReply(k)
		reply.APIKey = secret
		w.Header().Set("Cache-Control", "no-store")
		encode(w, r, http.StatusCreated, reply)
	})
}

// handleKeyList lists the keys the caller's client minted, oldest first,
// without their secrets; [] when there are none, or {"keys": […]} with
// asObject.
func handleKeyList(db *store.DB, asObject bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list, err := db.Keys(r.Context(), clientFrom(r.Context()).ID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		reply := make([]keyReply, 0, len(list))
		for _, k := range list {
			reply = append(reply, newKeyReply(k))
		}
		encodeList(w, r, asObject, "keys", reply)
	})
}

// handleKeyDelete revokes one of the keys the caller's client minted: every
// replica refuses it once its cache has caught up (at once on this one).
func handleKeyDelete(db *store.DB, cache *store.Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		err := db.DeleteKey(r.Context(), clientFrom(r.Context()).ID, id)
		if errors.Is(err, store.ErrNotFound) {
			err = &apiError{http.StatusNotFound, "KEY_NOT_FOUND", fmt.Sprintf("your client has no key %q", id)}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		refresh(r, cache)
		encode(w, r, http.StatusOK, keyDeletedReply{Message: "Key revoked", ID: id})
	})
}
