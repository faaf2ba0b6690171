package restapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

const countersYAML = `domain: edge
descriptors:
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limits:
          - {name: burst, unit: second, requests_per_unit: 2}
          - {name: hourly, unit: minute, unit_multiplier: 60, requests_per_unit: 5}
`

// adminKey is the operator key of the counters tests.
const adminKey = "operator-0123456789abcdef"

// withCounters wires the Envoy counters routes to a real rate-limit service
// over the test's limiter, the YAML above and the clients' rules; *rls is
// set to the service.
func withCounters(t *testing.T, admin string, rls **ratelimitsvc.Server) func(*Deps) {
	return func(d *Deps) {
		cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: "edge.yaml", Data: []byte(countersYAML)})
		if err != nil {
			t.Fatal(err)
		}
		s, err := ratelimitsvc.New(ratelimitsvc.Options{Limiter: d.Limiter, Rules: d.Cache, Log: d.Log, Now: testClock,
			Descriptors: func() *descriptors.Config { return cfg }})
		if err != nil {
			t.Fatal(err)
		}
		*rls = s
		d.EnvoyCounters, d.AdminKey = s, admin
	}
}

// envoy asks the rate-limit service about one descriptor of domain.
func envoy(t *testing.T, s *ratelimitsvc.Server, domain string, kv ...string) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0]
}

// TestEnvoyCounters: the owner of a REST domain reads and resets its Envoy
// counters with its API key; a YAML domain takes the operator key; no
// client key reaches another domain's counters.
func TestEnvoyCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		var rls *ratelimitsvc.Server
		e := newEnv(t, b, withCounters(t, adminKey, &rls))
		shop := e.register(t, "shop-"+testkit.RandomHex(t, 3), `"domain":"shop-`+b.db+`"`)
		shopDomain := "shop-" + b.db
		edge := e.register(t, "edge-"+testkit.RandomHex(t, 3), `"domain":"edge"`)
		if r := e.call(t, "POST", "/rules", shop.Key, `{"name":"login","algorithm":"fixed_window","limit":3,"window":60,"always_count":true,
			"descriptors":[{"key":"path","value":"/login"},{"key":"user"}]}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s", r.status, r.body)
		}
		for range 4 {
			envoy(t, rls, shopDomain, "path", "/login", "user", "alice")
		}
		if st := envoy(t, rls, shopDomain, "path", "/login", "user", "alice"); st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("alice after 4 logins of 3: %v, want OVER_LIMIT", st)
		}
		alice := `{"descriptors":[{"entries":[{"key":"path","value":"/login"},{"key":"user","value":"alice"}]},{"entries":[{"key":"path","value":"/other"}]}]}`
		path := "/descriptors/" + shopDomain + "/counters"

		// The owner reads: exactly what the service counts, counting nothing.
		for range 2 {
			r := e.call(t, "POST", path, shop.Key, alice)
			want := `{"domain":"` + shopDomain + `","descriptors":[` +
				`{"entries":[{"key":"path","value":"/login"},{"key":"user","value":"alice"}],"matched":true,"key":"path_/login.user",` +
				`"limits":[{"name":"login","requests_per_unit":3,"unit":"MINUTE","unit_multiplier":1,"window":60,"algorithm":"fixed_window","always_count":true,"remaining":0,"reset_after":30}]},` +
				`{"entries":[{"key":"path","value":"/other"}],"matched":false,"limits":[]}]}`
			if r.status != http.StatusOK || strings.TrimSpace(r.body) != want {
				t.Fatalf("read = %d %s\nwant %s", r.status, r.body, want)
			}
		}
		// The owner resets: alice logs in again at once.
		r := e.call(t, "POST", path+"/reset", shop.Key, alice)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"keys_deleted":1`) || strings.Contains(r.body, `"remaining"`) {
			t.Errorf("reset = %d %s, want keys_deleted 1 and no remaining", r.status, r.body)
		}
		if st := envoy(t, rls, shopDomain, "path", "/login", "user", "alice"); st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 2 {
			t.Errorf("alice after the reset: %v, want OK with 2 left", st)
		}

		// A YAML domain: not with its owner's key, with the operator's.
		envoy(t, rls, "edge", "path", "/login", "user", "bob")
		bob := `{"descriptors":[{"entries":[{"key":"path","value":"/login"},{"key":"user","value":"bob"}]}]}`
		wantError(t, e.call(t, "POST", "/descriptors/edge/counters", edge.Key, bob), http.StatusForbidden, "OPERATOR_KEY_REQUIRED")
		wantError(t, e.call(t, "POST", "/descriptors/edge/counters/reset", edge.Key, bob), http.StatusForbidden, "OPERATOR_KEY_REQUIRED")
		r = e.call(t, "POST", "/descriptors/edge/counters", adminKey, bob)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"name":"burst","requests_per_unit":2,"unit":"SECOND","unit_multiplier":1,"window":1,"algorithm":"fixed_window","remaining":1`) ||
			!strings.Contains(r.body, `"name":"hourly","requests_per_unit":5,"unit":"MINUTE","unit_multiplier":60,"window":3600,"algorithm":"fixed_window","remaining":4`) {
			t.Errorf("operator read of edge = %d %s", r.status, r.body)
		}
		r = e.call(t, "POST", "/descriptors/edge/counters/reset", "", bob, "Authorization", "Bearer "+adminKey)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"keys_deleted":2`) {
			t.Errorf("operator reset of edge = %d %s, want both limits' counters deleted", r.status, r.body)
		}
		// The operator reaches REST domains too, and no other route.
		if r := e.call(t, "POST", path, adminKey, alice); r.status != http.StatusOK {
			t.Errorf("operator read of a REST domain = %d %s", r.status, r.body)
		}
		wantError(t, e.call(t, "GET", "/rules/list", adminKey, ""), http.StatusUnauthorized, "INVALID_API_KEY")

		// No client key reaches another domain.
		wantError(t, e.call(t, "POST", path, edge.Key, alice), http.StatusForbidden, "FORBIDDEN_DOMAIN")
		wantError(t, e.call(t, "POST", path+"/reset", edge.Key, alice), http.StatusForbidden, "FORBIDDEN_DOMAIN")
		wantError(t, e.call(t, "POST", "/descriptors/edge/counters/reset", shop.Key, bob), http.StatusForbidden, "FORBIDDEN_DOMAIN")
		wantError(t, e.call(t, "POST", "/descriptors/nowhere/counters", shop.Key, bob), http.StatusForbidden, "FORBIDDEN_DOMAIN")
		wantError(t, e.call(t, "POST", path, "", alice), http.StatusUnauthorized, "MISSING_API_KEY")
		wantError(t, e.call(t, "POST", path, adminKey+"x", alice), http.StatusUnauthorized, "INVALID_API_KEY")

		// Refusals of the request itself.
		wantError(t, e.call(t, "POST", "/descriptors/nowhere/counters", adminKey, bob), http.StatusNotFound, "DOMAIN_NOT_FOUND")
		wantError(t, e.call(t, "POST", path, shop.Key, `{}`), http.StatusBadRequest, "MISSING_FIELD")
		wantError(t, e.call(t, "POST", path, shop.Key, `{"descriptors":[]}`), http.StatusBadRequest, "INVALID_DESCRIPTORS")
		wantError(t, e.call(t, "POST", path, shop.Key, `{"descriptors":[{"entries":[]}]}`), http.StatusBadRequest, "INVALID_DESCRIPTORS")
		wantError(t, e.call(t, "POST", path, shop.Key, `{"descriptors":[{"entries":[{"value":"x"}]}]}`), http.StatusBadRequest, "INVALID_DESCRIPTORS")
		wantError(t, e.call(t, "POST", path, shop.Key, `{"descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}`), http.StatusBadRequest, "INVALID_DESCRIPTORS")
		wantError(t, e.call(t, "POST", path, shop.Key, `{"descriptor":[]}`), http.StatusBadRequest, "UNKNOWN_FIELD")
		wantError(t, e.call(t, "GET", path, shop.Key, ""), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	})
}

// TestEnvoyCountersWithoutAdminKey: without ADMIN_API_KEY nobody reaches a
// YAML domain's counters, and an empty key is no key.
func TestEnvoyCountersWithoutAdminKey(t *testing.T) {
	var rls *ratelimitsvc.Server
	e := newEnv(t, backends()[0], withCounters(t, "", &rls), func(d *Deps) { d.ClaimableDomains = []string{"edge"} })
	edge := e.register(t, "edge", `"domain":"edge"`)
	bob := `{"descriptors":[{"entries":[{"key":"path","value":"/login"},{"key":"user","value":"bob"}]}]}`
	wantError(t, e.call(t, "POST", "/descriptors/edge/counters", edge.Key, bob), http.StatusForbidden, "OPERATOR_KEY_REQUIRED")
	wantError(t, e.call(t, "POST", "/descriptors/edge/counters", "", bob, "Authorization", "Bearer "), http.StatusUnauthorized, "MISSING_API_KEY")
}
