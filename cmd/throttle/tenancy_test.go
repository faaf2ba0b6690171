package main

import (
	"net/http"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// Tenants stay in their lanes (issue 38), through the built binary on the
// embedded default and on Redis + PostgreSQL (restSetups).

// tenancyAdminKey is ADMIN_API_KEY in these tests.
const tenancyAdminKey = "tenancy-operator-key-0123456789"

// tenancySetups are restSetups with the operator key.
func tenancySetups(t *testing.T, env ...string) map[string][]string {
	t.Helper()
	setups := restSetups(t)
	for name, e := range setups {
		setups[name] = append(append(e, "ADMIN_API_KEY="+tenancyAdminKey), env...)
	}
	return setups
}

// register posts body to /register with key (the operator's, or none) and
// returns the status and the reply.
func register(t *testing.T, s *throttletest.Server, key, body string) (int, map[string]any) {
	t.Helper()
	status, _, reply := doJSON(t, "POST", s.URL+"/register", key, body)
	return status, reply
}

// mustRegister registers body with key and returns the reply; anything but
// a 201 fails the test.
func mustRegister(t *testing.T, s *throttletest.Server, key, body string) map[string]any {
	t.Helper()
	status, reply := register(t, s, key, body)
	if status != http.StatusCreated {
		t.Fatalf("POST /register %s: %d %v", body, status, reply)
	}
	return reply
}

// TestCounterScopesApart: a client's counters and an Envoy domain's never
// share a key, even when the domain is named like the client's id. Client
// A's domain is B's id; A's descriptor rule counts "k=v" on it, whose
// counter the engine names "1:k1:v"; B's /check of the identifier "1:k1:v"
// with the same limit must not spend A's budget (before, both were the key
// (B's id, "1:k1:v"): A's counters read what B counted).
func TestCounterScopesApart(t *testing.T) {
	for name, env := range tenancySetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			b := mustRegister(t, s, "", `{"name":"b","email":"b@example.com"}`)
			bID, bKey := b["client_id"].(string), b["api_key"].(string)
			a := mustRegister(t, s, tenancyAdminKey, `{"name":"a","email":"a@example.com","domain":"`+bID+`"}`)
			aKey := a["api_key"].(string)
			if status, _, body := doJSON(t, "POST", s.URL+"/rules", aKey, `{"name":"k","algorithm":"fixed_window","limit":1,"window":60,"descriptors":[{"key":"k"}]}`); status != http.StatusCreated {
				t.Fatalf("A's descriptor rule: %d %v", status, body)
			}
			if status, _, body := doJSON(t, "POST", s.URL+"/check", bKey, `{"identifier":"1:k1:v","limit":1,"window":60,"algorithm":"fixed_window"}`); status != http.StatusOK || body["allowed"] != true {
				t.Fatalf("B's check: %d %v", status, body)
			}
			status, _, got := doJSON(t, "POST", s.URL+"/descriptors/"+bID+"/counters", aKey, `{"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
			if status != http.StatusOK {
				t.Fatalf("A reads its counters: %d %v", status, got)
			}
			if limits := counterLimits(t, got); len(limits) != 1 || limits[0]["remaining"] != float64(1) {
				t.Errorf("A's k=v after B's check: %v, want remaining 1: B's counter is not A's", limits)
			}
		})
	}
}
