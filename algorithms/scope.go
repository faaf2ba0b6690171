package algorithms

// The scopes of the keys Throttle decides. A scope starts with the kind of
// tenant it belongs to, so a client's counters and an Envoy domain's never
// share a key whatever the two are named: a domain called like a client's
// id ("3d30af2e-…"), or like the registration limit, is "domain/3d30af2e-…",
// never "client/3d30af2e-…".
const (
	clientScopePrefix = "client/"
	domainScopePrefix = "domain/"
	// RegistrationScope is the scope of the REST API's limit on POST
	// /register (its identifiers are client IP addresses).
	RegistrationScope = "register"
)

// ClientScope is the scope of the counters of the REST client clientID
// (/check, /check/ip, /check/batch, /reset).
func ClientScope(clientID string) string { return clientScopePrefix + clientID }

// DomainScope is the scope of the counters of the Envoy rate-limit domain
// (ShouldRateLimit, the REST counters routes, the quota service).
func DomainScope(domain string) string { return domainScopePrefix + domain }
