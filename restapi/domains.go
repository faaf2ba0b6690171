package restapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
)

// Envoy domains are the operator's. A client has one only when the operator
// grants it: at registration with the operator key (ADMIN_API_KEY), or by
// claiming a domain one of the operator's patterns allows
// (CLAIMABLE_DOMAINS). A domain the descriptor configuration names (YAML
// files or xDS) is reserved: no client gets it, the operator key included,
// and a client that had one before the configuration named it loses it
// (cmd/throttle releases it).

// domainGrants decides which domains a registration may have.
type domainGrants struct {
	// claimable are patterns of domains anyone may claim: a domain, or a
	// prefix ending in '*' ("tenant-*"; "*" is every domain).
	claimable []string
	// reserved reports whether the descriptor configuration names a domain.
	reserved func(domain string) bool
	// admin is the SHA-256 of the operator key; zero when there is none.
	admin [32]byte
}

func newDomainGrants(claimable []string, reserved func(string) bool, adminKey string) domainGrants {
	g := domainGrants{claimable: claimable, reserved: reserved}
	if adminKey != "" {
		g.admin = sha256.Sum256([]byte(adminKey))
	}
	return g
}

// operator reports whether r carries the operator key (compared in
// constant time).
func (g domainGrants) operator(r *http.Request) bool {
	key := apiKey(r)
	if key == "" || g.admin == ([32]byte{}) {
		return false
	}
	got := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(got[:], g.admin[:]) == 1
}

// authorize says why a registration may not have domain ("" needs no
// grant): reserved by the configuration, or neither the operator's nor
// claimable.
func (g domainGrants) authorize(r *http.Request, domain string, operator bool) error {
	switch {
	case domain == "":
		return nil
	case g.reserved != nil && g.reserved(domain):
		return &apiError{http.StatusConflict, "DOMAIN_RESERVED", fmt.Sprintf("domain %q is the operator's: the descriptor configuration (YAML or xDS) names it, and no client may have it", domain)}
	case operator || g.mayClaim(domain):
		return nil
	}
	msg := fmt.Sprintf("domain %q needs the operator's grant: register with the operator key (ADMIN_API_KEY)", domain)
	if len(g.claimable) > 0 {
		msg += ", or claim a domain of " + strings.Join(g.claimable, ", ")
	}
	if apiKey(r) != "" {
		msg += "; the key sent is not the operator key"
	}
	return &apiError{http.StatusForbidden, "DOMAIN_NOT_GRANTED", msg}
}

// mayClaim reports whether a pattern of g.claimable allows domain.
func (g domainGrants) mayClaim(domain string) bool {
	for _, p := range g.claimable {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(domain, prefix) || p == domain {
			return true
		}
	}
	return false
}

// asOperator marks the request as the operator's, for the log.
func asOperator(ctx context.Context) {
	if st := stateFrom(ctx); st != nil {
		st.operator = true
		st.log = st.log.With("operator", true)
	}
}
