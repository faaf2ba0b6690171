package restapi

import (
	"net/http"
	"testing"
)

// TestDomainGrants: a domain is the operator's to grant (its key, or a
// CLAIMABLE_DOMAINS pattern), never one the descriptor configuration
// names; no domain needs no grant.
func TestDomainGrants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0], func(d *Deps) {
		d.ClaimableDomains = []string{"tenant-*", "sandbox"}
		d.ReservedDomain = func(domain string) bool { return domain == "edge" || domain == "tenant-edge" }
	})
	for _, tt := range []struct {
		domain, key string
		status      int
		code        string
	}{
		{"", "", 201, ""},
		{"tenant-a", "", 201, ""},
		{"sandbox", "", 201, ""},
		{"sandbox-2", "", 403, "DOMAIN_NOT_GRANTED"},
		{"shop", "", 403, "DOMAIN_NOT_GRANTED"},
		{"shop", "not-the-operator-key", 403, "DOMAIN_NOT_GRANTED"},
		{"shop", testAdminKey, 201, ""},
		{"edge", "", 409, "DOMAIN_RESERVED"},
		{"edge", testAdminKey, 409, "DOMAIN_RESERVED"},
		{"tenant-edge", "", 409, "DOMAIN_RESERVED"},
	} {
		body := `{"name":"g","email":"g@example.com"`
		if tt.domain != "" {
			body += `,"domain":"` + tt.domain + `"`
		}
		r := e.call(t, "POST", "/register", tt.key, body+"}")
		if tt.status == http.StatusCreated {
			if got := decodeReply[registerReply](t, r); r.status != 201 || got.Domain != tt.domain {
				t.Errorf("domain %q with key %q: %d %s, want 201 with the domain", tt.domain, tt.key, r.status, r.body)
			}
			continue
		}
		wantError(t, r, tt.status, tt.code)
	}
}
