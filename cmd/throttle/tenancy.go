package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/restapi"
	"github.com/throttle-rl/throttle/store"
)

// Tenants stay in their lanes (issue 38): Envoy domains are the operator's,
// and what one client stores is bounded.

// tenancyConfig is the settings of the tenants' lanes.
type tenancyConfig struct {
	// ClaimableDomains are the domain patterns a registration may claim
	// without the operator key (CLAIMABLE_DOMAINS).
	ClaimableDomains []string
	// Quotas cap each client's rules, exemptions, overrides and keys
	// (MAX_*_PER_CLIENT).
	Quotas store.Quotas
}

// tenancySettings are the rows of the tenants' lanes.
var tenancySettings = []setting{
	{env: "CLAIMABLE_DOMAINS", flag: "claimable-domains",
		usage: "comma-separated Envoy domains a POST /register may claim without the operator key (ADMIN_API_KEY, which may " +
			"grant any): a domain, or a prefix ending in * (tenant-*; * alone: any domain); a domain the descriptor " +
			"configuration (YAML or xDS) names is never a client's; empty = only the operator grants domains",
		set: func(c *config, v string) (err error) {
			c.Tenancy.ClaimableDomains, err = parseDomainPatterns(v)
			return
		}},
	{env: "MAX_RULES_PER_CLIENT", flag: "max-rules-per-client", def: "1000",
		usage: "most rules one client may have; one more is refused 409 TOO_MANY_RULES (every replica's cache holds every " +
			"client's rules)",
		set: func(c *config, v string) (err error) { c.Tenancy.Quotas.Rules, err = parsePositive(v); return }},
	{env: "MAX_EXEMPTIONS_PER_CLIENT", flag: "max-exemptions-per-client", def: "10000",
		usage: "most exemptions one client may have; one more is refused 409 TOO_MANY_EXEMPTIONS",
		set:   func(c *config, v string) (err error) { c.Tenancy.Quotas.Exemptions, err = parsePositive(v); return }},
	{env: "MAX_KEYS_PER_CLIENT", flag: "max-keys-per-client", def: "100",
		usage: "most check-only API keys one client may mint (POST /keys); one more is refused 409 TOO_MANY_KEYS",
		set:   func(c *config, v string) (err error) { c.Tenancy.Quotas.Keys, err = parsePositive(v); return }},
	{env: "MAX_CLIENTS", flag: "max-clients", def: "10000",
		usage: "most clients in all; a registration past it, the operator's too, is refused 409 TOO_MANY_CLIENTS, so the " +
			"per-client caps bound the whole",
		set: func(c *config, v string) (err error) { c.Tenancy.Quotas.Clients, err = parsePositive(v); return }},
	{env: "MAX_OVERRIDES_PER_CLIENT", flag: "max-overrides-per-client", def: "10000",
		usage: "most overrides one client may have over all its rules (and 10000 per rule); one more is refused 409 TOO_MANY_OVERRIDES",
		set:   func(c *config, v string) (err error) { c.Tenancy.Quotas.Overrides, err = parsePositive(v); return }},
}

// domainPattern is a domain (store's syntax), a prefix of one ending in
// '*', or '*' alone.
var domainPattern = regexp.MustCompile(`^(\*|[a-z0-9][a-z0-9._-]{0,99}|[a-z0-9][a-z0-9._-]{0,98}\*)$`)

// parseDomainPatterns reads CLAIMABLE_DOMAINS.
func parseDomainPatterns(v string) ([]string, error) {
	var out []string
	var errs []error
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
		case !domainPattern.MatchString(p):
			errs = append(errs, fmt.Errorf("%q is not a domain (a-z, 0-9, '.', '_', '-'), a prefix of one ending in *, or *", p))
		default:
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// withTenancy adds the tenants' lanes to d.
func (a *app) withTenancy(d restapi.Deps) restapi.Deps {
	d.ClaimableDomains = a.cfg.Tenancy.ClaimableDomains
	d.ReservedDomain = a.reservedDomain
	return d
}

// reservedDomain reports whether the descriptor configuration in use names
// domain.
func (a *app) reservedDomain(domain string) bool {
	return a.current != nil && a.current().Domain(domain) != nil
}

// openTenancy takes from clients the domains the descriptor configuration
// names, from now on: store's ReleaseReserved looks every second.
func (a *app) openTenancy(context.Context) error {
	if a.current == nil {
		return nil // no descriptor configuration: no domain is reserved
	}
	reserved := func() []string { return a.current().Domains() }
	a.goBG("reserved domains", func(ctx context.Context) error { return a.cache.ReleaseReserved(ctx, reserved, time.Second) })
	return nil
}
