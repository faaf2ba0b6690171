package ratelimitsvc

import (
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"mime"
	"net/http"

	"github.com/throttle-rl/throttle/internal/apikey"
	"github.com/throttle-rl/throttle/internal/envoycounters"
	"github.com/throttle-rl/throttle/store"
)

// JSONAccess is who may spend counters through POST /json (JSONHandler).
// The reference service serves /json to anyone who reaches its port; here
// the domains of REST clients stay theirs, and a gRPC port that asks
// client certificates makes /json ask the same.
type JSONAccess struct {
	// Peer, when set, checks the TLS connection of each call (nil: plain
	// HTTP) before its body is read: an error refuses the call with 403.
	// Set when the gRPC port asks client certificates
	// (GRPC_CLIENT_TLS_CACERT), so that /json asks the same
	// (tlsreload.Reloader.CheckClient).
	Peer func(*tls.ConnectionState) error
	// Keys finds the client of an API key by its hash (store.Cache): a
	// domain a REST client owns, and the descriptor configuration does not
	// describe, is decided only for a call that carries one of that
	// client's keys (X-API-Key, or Authorization: Bearer), as its REST
	// checks are. Nil: such domains are refused to every call.
	Keys keySource
}

// keySource is what JSONAccess needs of store.Cache.
type keySource interface {
	KeyByHash(h [32]byte) (_ store.Client, scope string, ok bool)
}

// jsonRefusal is a call refused before it is decided: its status and why.
type jsonRefusal struct {
	status int
	msg    string
}

// checkJSONPeer applies a.Peer to r's connection.
func (a JSONAccess) checkJSONPeer(r *http.Request) *jsonRefusal {
	if a.Peer == nil {
		return nil
	}
	if err := a.Peer(r.TLS); err != nil {
		return &jsonRefusal{http.StatusForbidden, "POST /json asks the client certificate the gRPC port asks (GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN): " + err.Error()}
	}
	return nil
}

// checkJSONContentType refuses any body type but application/json, a
// missing one included: a web page can make a browser send a form, text or
// a typeless body anywhere without asking (no CORS preflight), but never
// application/json.
func checkJSONContentType(r *http.Request) *jsonRefusal {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &jsonRefusal{http.StatusUnsupportedMediaType, fmt.Sprintf("POST /json takes only Content-Type: application/json, not %s", ct)}
}

// checkJSONDomain lets r be decided on domain: any domain of the
// descriptor configuration (YAML files, xDS), a domain no one has, and a
// REST client's only with one of that client's keys.
func (s *Server) checkJSONDomain(a JSONAccess, r *http.Request, domain string) *jsonRefusal {
	if s.opts.Rules == nil {
		return nil
	}
	owner, owned := s.opts.Rules.ClientByDomain(domain)
	if !owned {
		return nil
	}
	if _, src := s.domain(domain); src == envoycounters.YAML {
		return nil // the configuration's limits decide it, as over gRPC
	}
	key := apikey.FromRequest(r)
	if key == "" {
		return &jsonRefusal{http.StatusUnauthorized, fmt.Sprintf("domain %q belongs to a REST client: send that client's API key (X-API-Key, or Authorization: Bearer)", domain)}
	}
	if a.Keys == nil {
		return &jsonRefusal{http.StatusForbidden, fmt.Sprintf("domain %q belongs to a REST client, whose keys this server does not check on POST /json", domain)}
	}
	c, _, ok := a.Keys.KeyByHash(sha256.Sum256([]byte(key)))
	switch {
	case !ok:
		return &jsonRefusal{http.StatusUnauthorized, "the API key is not valid"}
	case c.ID != owner.ID:
		return &jsonRefusal{http.StatusForbidden, fmt.Sprintf("domain %q is not your client's", domain)}
	}
	return nil
}

// write sends the refusal as text, as /json's other errors.
func (f *jsonRefusal) write(w http.ResponseWriter) {
	if f.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="throttle"`)
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.Error(w, f.msg, f.status)
}
