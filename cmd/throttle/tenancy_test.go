package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
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

// TestDomainsAreTheOperators: a client gets an Envoy domain only when the
// operator grants it, never one the descriptor configuration names, and
// loses one the configuration names later, for good. Before, any
// registration took any unused domain ("edge" of the YAML included, or by
// its name alone), and a client whose domain's YAML went away decided that
// domain's Envoy traffic with its own rules.
func TestDomainsAreTheOperators(t *testing.T) {
	for name, env := range tenancySetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "edge.yaml"), mustRead(t, "testdata/edge.yaml"))
			s := throttletest.Start(t, append(env, "DESCRIPTORS_DIR="+dir, "DESCRIPTORS_RELOAD_INTERVAL=200ms", "CLAIMABLE_DOMAINS=tenant-*", "RLCONFIG_ON_REST_PORT=true")...)
			for _, tc := range []struct {
				what, key, body string
				status          int
				code, domain    string
			}{
				{"the YAML's domain", "", `{"name":"x","email":"x@example.com","domain":"edge"}`, 409, "DOMAIN_RESERVED", ""},
				{"the YAML's domain, by the operator", tenancyAdminKey, `{"name":"x","email":"x@example.com","domain":"edge"}`, 409, "DOMAIN_RESERVED", ""},
				{"an ungranted domain", "", `{"name":"x","email":"x@example.com","domain":"shop"}`, 403, "DOMAIN_NOT_GRANTED", ""},
				{"with a client's key", "thr_" + strings.Repeat("0", 64), `{"name":"x","email":"x@example.com","domain":"shop"}`, 403, "DOMAIN_NOT_GRANTED", ""},
				{"a claimable domain", "", `{"name":"x","email":"x@example.com","domain":"tenant-a"}`, 201, "", "tenant-a"},
				{"a name like the YAML's domain", "", `{"name":"edge","email":"x@example.com"}`, 201, "", ""},
				{"the operator's grant", tenancyAdminKey, `{"name":"shop","email":"x@example.com","domain":"shop"}`, 201, "", "shop"},
				{"a granted domain again", tenancyAdminKey, `{"name":"shop","email":"y@example.com","domain":"shop"}`, 409, "CONFLICT", ""},
			} {
				status, reply := register(t, s, tc.key, tc.body)
				if status != tc.status || (tc.code != "" && reply["code"] != tc.code) || (status == 201 && reply["domain"] != tc.domain) {
					t.Errorf("%s: %d %v, want %d %s domain %q", tc.what, status, reply, tc.status, tc.code, tc.domain)
				}
			}

			// The operator grants "shop"; its client limits it with a rule
			// of 1 a minute. Then the YAML names "shop" too: the client
			// loses the domain, for good — when the YAML goes, no client
			// decides "shop" (nothing limits it).
			shop := mustRegister(t, s, tenancyAdminKey, `{"name":"shop owner","email":"o@example.com","domain":"shop-2"}`)
			key := shop["api_key"].(string)
			if status, _, body := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"one","algorithm":"fixed_window","limit":1,"window":60,"descriptors":[{"key":"k"}]}`); status != 201 {
				t.Fatalf("rule: %d %v", status, body)
			}
			rls := rlsClient(t, s)
			twice := func() string {
				return outcome(askRLS(t, rls, "shop-2", rlsDesc("k", "v"))) + ", " + outcome(askRLS(t, rls, "shop-2", rlsDesc("k", "v")))
			}
			if got := twice(); got != "OK ok:0, OVER_LIMIT over:0" {
				t.Fatalf("shop-2 twice by its client's rule: %s", got)
			}
			shopYAML := filepath.Join(dir, "shop.yaml")
			writeFile(t, shopYAML, []byte("domain: shop-2\ndescriptors:\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
			waitUntil(t, "the client to lose shop-2", func() bool {
				_, _, me := doJSON(t, "GET", s.URL+"/me", key, "")
				return me["domain"] == ""
			})
			if err := os.Remove(shopYAML); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "shop-2's YAML to go", func() bool { return !strings.Contains(mustGetText(t, s.URL+"/rlconfig"), "shop-2") })
			if got := twice(); got != "OK ok:0, OK ok:0" {
				t.Errorf("shop-2 twice once its YAML went: %s, want OK twice (no client decides it)", got)
			}
			if !strings.Contains(s.Logs.String(), "lost its Envoy domain") {
				t.Errorf("the release is not logged:\n%s", s.Logs)
			}
		})
	}
}

// TestRegisterJSONOnly: POST /register takes JSON only — a form, text or
// a body without a type is 415, which no web page can make a browser send
// without a preflight — and an email is no account: two registrations of
// one email both succeed, so none tells whether an email is registered.
// Before, a form registered (201) and the second email was a 409 naming it.
func TestRegisterJSONOnly(t *testing.T) {
	for name, env := range tenancySetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x", ""} {
				req, _ := http.NewRequest("POST", s.URL+"/register", strings.NewReader(`{"name":"form","email":"form@example.com"}`))
				if ct != "" {
					req.Header.Set("Content-Type", ct)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var e map[string]any
				json.NewDecoder(res.Body).Decode(&e)
				res.Body.Close()
				if res.StatusCode != http.StatusUnsupportedMediaType || e["code"] != "UNSUPPORTED_MEDIA_TYPE" {
					t.Errorf("Content-Type %q: %d %v, want 415 UNSUPPORTED_MEDIA_TYPE", ct, res.StatusCode, e)
				}
			}
			for i := range 2 {
				status, reply := register(t, s, "", `{"name":"same","email":"same@example.com"}`)
				if status != http.StatusCreated {
					t.Errorf("registration %d of one email: %d %v, want 201", i+1, status, reply)
				}
			}
			mustRegister(t, s, tenancyAdminKey, `{"name":"a","email":"secret-a@example.com","domain":"taken"}`)
			status, reply := register(t, s, tenancyAdminKey, `{"name":"b","email":"b@example.com","domain":"taken"}`)
			if status != http.StatusConflict || strings.Contains(fmt.Sprint(reply), "secret-a") {
				t.Errorf("a taken domain: %d %v, want 409 naming no other client's email", status, reply)
			}
		})
	}
}

// writeFile writes data to path (0644), failing the test on error.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mustRead reads path, failing the test on error.
func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustGetText GETs url and returns the body.
func mustGetText(t *testing.T, url string) string {
	t.Helper()
	_, _, body := testkit.GetText(t, url)
	return body
}

// waitUntil polls cond every 100ms for up to 15s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestTenantQuotas: a client has at most MAX_RULES_PER_CLIENT rules,
// MAX_EXEMPTIONS_PER_CLIENT exemptions and MAX_OVERRIDES_PER_CLIENT
// overrides; one more is a 409 naming the quota, and another client is
// not affected. Before, there was no cap (but 10,000 overrides per rule).
func TestTenantQuotas(t *testing.T) {
	for name, env := range tenancySetups(t, "MAX_RULES_PER_CLIENT=3", "MAX_EXEMPTIONS_PER_CLIENT=2", "MAX_OVERRIDES_PER_CLIENT=2") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			a := newRESTClient(t, s, s.Register(t, "quota-a-"+name))
			b := newRESTClient(t, s, s.Register(t, "quota-b-"+name))
			for _, c := range []*restClient{a, b} {
				for i := range 3 {
					if status, _ := c.do(t, "POST", "/rules", fmt.Sprintf(`{"name":"r%d","algorithm":"fixed_window","limit":5,"window":60}`, i), nil); status != http.StatusCreated {
						t.Fatalf("rule %d: %d", i, status)
					}
				}
			}
			for _, w := range []struct {
				path       string
				oks        []string // within the quota (A has its 3 rules already)
				over, code string
			}{
				{"/rules", nil, `{"name":"r3","limit":1,"window":60}`, "TOO_MANY_RULES"},
				{"/exemptions", []string{`{"identifier":"x1"}`, `{"identifier":"x2"}`}, `{"identifier":"x3"}`, "TOO_MANY_EXEMPTIONS"},
				{"/rules/r0/overrides", []string{`{"identifier":"u1","limit":1}`, `{"identifier":"u2","limit":1}`}, `{"identifier":"u3","limit":1}`, "TOO_MANY_OVERRIDES"},
			} {
				for _, body := range w.oks {
					if status, _ := a.do(t, "POST", w.path, body, nil); status != http.StatusCreated {
						t.Fatalf("POST %s %s within the quota: %d", w.path, body, status)
					}
				}
				var e struct{ Code, Error string }
				if status, _ := a.do(t, "POST", w.path, w.over, &e); status != http.StatusConflict || e.Code != w.code {
					t.Errorf("POST %s past the quota: %d %s %q, want 409 %s", w.path, status, e.Code, e.Error, w.code)
				}
			}
			if status, _ := b.do(t, "POST", "/exemptions", `{"identifier":"x1"}`, nil); status != http.StatusCreated {
				t.Errorf("another client's exemption: %d, want 201", status)
			}
		})
	}
}

// TestWritesLoadOnlyTheirClient: a write reloads, on every replica, the
// rows of its own client, never every client's: with ten clients of five
// rules each, one client's new exemption reads that client's few rows
// (throttle_cache_rows_loaded_total), and no replica reloads whole after
// its start (throttle_cache_loads_total{kind="full"} stays 1). On Redis +
// PostgreSQL the second replica learns of the write by its poll. Before,
// each write reloaded every client's rows on every replica.
func TestWritesLoadOnlyTheirClient(t *testing.T) {
	for name, env := range tenancySetups(t, "CACHE_REFRESH_INTERVAL=200ms") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			servers := []*throttletest.Server{throttletest.Start(t, env...)}
			if name != "embedded" {
				servers = append(servers, throttletest.Start(t, env...))
			}
			s := servers[0]
			var keys []string
			for i := range 10 {
				key := s.Register(t, fmt.Sprintf("tenant-%d-%s", i, name))
				keys = append(keys, key)
				for r := range 5 {
					if status, _, body := doJSON(t, "POST", s.URL+"/rules", key, fmt.Sprintf(`{"name":"r%d","algorithm":"fixed_window","limit":5,"window":60}`, r)); status != http.StatusCreated {
						t.Fatalf("rule: %d %v", status, body)
					}
				}
			}
			last := servers[len(servers)-1]
			waitUntil(t, "the last replica to know the last client's rules", func() bool {
				status, _, body := doJSON(t, "POST", last.URL+"/check", keys[9], `{"identifier":"u","rule":"r4","hits":0}`)
				return status == http.StatusOK && body["rule"] == "r4"
			})
			before := make([]float64, len(servers))
			for i, r := range servers {
				before[i] = r.Metric(t, "throttle_cache_rows_loaded_total")
			}
			if status, _, body := doJSON(t, "POST", s.URL+"/exemptions", keys[3], `{"identifier":"vip"}`); status != http.StatusCreated {
				t.Fatalf("exemption: %d %v", status, body)
			}
			waitUntil(t, "every replica to know the exemption", func() bool {
				for _, r := range servers {
					if _, _, body := doJSON(t, "POST", r.URL+"/check", keys[3], `{"identifier":"vip","rule":"r0"}`); body["exempted"] != true {
						return false
					}
				}
				return true
			})
			for i, r := range servers {
				// One client, its five rules and its exemption: 7 rows.
				if got := r.Metric(t, "throttle_cache_rows_loaded_total") - before[i]; got < 1 || got > 7 {
					t.Errorf("replica %d read %v rows for one client's write, want its client's 7 at most (not the 60 of every client)", i, got)
				}
				if full, changes := metricWith(t, r, "throttle_cache_loads_total", map[string]string{"kind": "full"}),
					metricWith(t, r, "throttle_cache_loads_total", map[string]string{"kind": "changes"}); full != 1 || changes < 1 {
					t.Errorf("replica %d: %v full loads, %v loads of changes; want 1 full (its start), the rest changes", i, full, changes)
				}
			}
		})
	}
}

// TestCheckOnlyKeys: a client mints a check-only key (POST /keys
// {"scope":"check"}, the secret as api_key), which decides /check,
// /check/ip and /check/batch on the client's counters and is 403
// KEY_SCOPE anywhere else (it cannot mint keys either); GET /keys lists it
// without its secret, DELETE /keys/{id} revokes it (401 after), and
// MAX_KEYS_PER_CLIENT caps how many a client has. Before, every key could
// do everything.
func TestCheckOnlyKeys(t *testing.T) {
	for name, env := range tenancySetups(t, "MAX_KEYS_PER_CLIENT=2") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			own := s.Register(t, "keys-"+name)
			status, _, minted := doJSON(t, "POST", s.URL+"/keys", own, `{"scope":"check"}`)
			checkKey, _ := minted["api_key"].(string)
			if status != http.StatusCreated || !strings.HasPrefix(checkKey, "thr_") || minted["scope"] != "check" {
				t.Fatalf("POST /keys: %d %v", status, minted)
			}
			for _, c := range []struct{ path, body string }{
				{"/check", `{"identifier":"u","limit":2,"window":60}`},
				{"/check/ip", `{"limit":2,"window":60}`},
				{"/check/batch", `{"checks":[{"identifier":"u","limit":2,"window":60}]}`},
			} {
				if status, _, body := doJSON(t, "POST", s.URL+c.path, checkKey, c.body); status != http.StatusOK {
					t.Errorf("POST %s with the check key: %d %v, want 200", c.path, status, body)
				}
			}
			// The check key spent the client's own counter: u is at 2 of 2.
			if _, _, body := doJSON(t, "POST", s.URL+"/check", own, `{"identifier":"u","limit":2,"window":60}`); body["allowed"] != false {
				t.Errorf("the client's own check after two with its check key: %v, want refused", body)
			}
			for _, c := range []struct{ method, path, body string }{
				{"GET", "/me", ""}, {"POST", "/rules", `{"name":"r","limit":1,"window":60}`}, {"GET", "/rules/list", ""},
				{"POST", "/exemptions", `{"identifier":"x"}`}, {"POST", "/reset", `{"identifier":"u"}`},
				{"POST", "/keys", `{"scope":"check"}`}, {"GET", "/keys", ""}, {"GET", "/descriptors", ""},
			} {
				if status, _, body := doJSON(t, c.method, s.URL+c.path, checkKey, c.body); status != http.StatusForbidden || body["code"] != "KEY_SCOPE" {
					t.Errorf("%s %s with the check key: %d %v, want 403 KEY_SCOPE", c.method, c.path, status, body)
				}
			}
			listed := listKeys(t, s, own)
			if len(listed) != 1 || listed[0]["id"] != minted["id"] || listed[0]["api_key"] != nil {
				t.Errorf("GET /keys: %v, want the one key, without its secret", listed)
			}
			if status, _, body := doJSON(t, "POST", s.URL+"/keys", own, `{"scope":"admin"}`); status != http.StatusBadRequest || body["code"] != "INVALID_SCOPE" {
				t.Errorf("POST /keys scope admin: %d %v, want 400 INVALID_SCOPE", status, body)
			}
			doJSON(t, "POST", s.URL+"/keys", own, `{"scope":"check"}`)
			if status, _, body := doJSON(t, "POST", s.URL+"/keys", own, `{"scope":"check"}`); status != http.StatusConflict || body["code"] != "TOO_MANY_KEYS" {
				t.Errorf("a third key with MAX_KEYS_PER_CLIENT=2: %d %v, want 409 TOO_MANY_KEYS", status, body)
			}
			if status, _, body := doJSON(t, "DELETE", s.URL+"/keys/"+minted["id"].(string), own, ""); status != http.StatusOK {
				t.Fatalf("DELETE /keys/{id}: %d %v", status, body)
			}
			if status, _, body := doJSON(t, "POST", s.URL+"/check", checkKey, `{"identifier":"v","limit":2,"window":60}`); status != http.StatusUnauthorized {
				t.Errorf("the revoked key's check: %d %v, want 401", status, body)
			}
			if status, _, _ := doJSON(t, "DELETE", s.URL+"/keys/"+minted["id"].(string), own, ""); status != http.StatusNotFound {
				t.Errorf("revoking it again: %d, want 404", status)
			}
		})
	}
}

// listKeys returns GET /keys's list.
func listKeys(t *testing.T, s *throttletest.Server, key string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/keys", nil)
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /keys: %d %v", resp.StatusCode, err)
	}
	return list
}

// doIdem posts body to path with key and an Idempotency-Key, and any more
// headers (name, value, …); it returns the status, whether the reply was a
// replay, and the body.
func doIdem(t *testing.T, s *throttletest.Server, key, path, ikey, body string, headers ...string) (int, bool, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Idempotency-Key", ikey)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", out
}

// TestIdempotencyQuotas: a client keeps at most
// IDEMPOTENCY_MAX_RECORDS_PER_CLIENT replies, its oldest evicted first (a
// retry of it is decided anew), and never evicts another client's; a batch
// reply kept compactly replays as it was; on Redis the records are the
// client's own keys under throttle:idem:{<client>} with a TTL. And /check/ip's
// fingerprint holds the resolved address: another address replaying a
// first one's Idempotency-Key is 422, not the first one's decision. Before,
// every reply was kept whole for 24 h, unbounded, and the second address
// got the first one's "allowed".
func TestIdempotencyQuotas(t *testing.T) {
	for name, env := range tenancySetups(t, "IDEMPOTENCY_MAX_RECORDS_PER_CLIENT=3", "TRUSTED_PROXIES=127.0.0.1/32") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			a, b := s.Register(t, "idem-a-"+name), s.Register(t, "idem-b-"+name)
			check := func(id string) string { return `{"identifier":"` + id + `","limit":100,"window":60}` }
			if status, _, _ := doIdem(t, s, b, "/check", "k0", check("b")); status != http.StatusOK {
				t.Fatalf("B's check: %d", status)
			}
			batch := `{"checks":[` + check(strings.Repeat("x", 200)) + `,` + check(strings.Repeat("y", 200)) + `]}`
			doIdem(t, s, a, "/check/batch", "batch", batch)
			for i := range 3 {
				if status, replayed, _ := doIdem(t, s, a, "/check", fmt.Sprint("k", i), check(fmt.Sprint("u", i))); status != http.StatusOK || replayed {
					t.Fatalf("A's k%d: %d replayed %v", i, status, replayed)
				}
			}
			// A keeps k0..k2; the batch, its oldest, was evicted.
			_, replayed, anew := doIdem(t, s, a, "/check/batch", "batch", batch)
			if results, _ := anew["results"].([]any); replayed || len(results) != 2 || results[0].(map[string]any)["remaining"] != float64(98) {
				t.Fatalf("A's batch after 3 newer replies: replayed %v %v, want evicted: decided anew, remaining 98", replayed, anew)
			}
			// The batch is kept again (k0 evicted), and replays what it decided.
			if _, replayed, got := doIdem(t, s, a, "/check/batch", "batch", batch); !replayed || fmt.Sprint(got) != fmt.Sprint(anew) {
				t.Errorf("A's batch retried: replayed %v %v", replayed, got)
			}
			if _, replayed, _ := doIdem(t, s, a, "/check", "k2", check("u2")); !replayed {
				t.Errorf("A's k2 (among its 3 newest): not replayed")
			}
			if _, replayed, _ := doIdem(t, s, b, "/check", "k0", check("b")); !replayed {
				t.Errorf("B's k0 after A's flood: not replayed; A evicted B's record")
			}
			if name != "embedded" {
				rdb := redistest.NewClient(t, redistest.SharedURL(t))
				aID := clientID(t, s, a)
				if n := rdb.ZCard(t.Context(), "throttle:idem:{"+aID+"}#index").Val(); n != 3 {
					t.Errorf("A's records in Redis: %d, want 3", n)
				}
				keys := rdb.Keys(t.Context(), "throttle:idem:{"+aID+"}:*").Val()
				for _, k := range keys {
					if ttl := rdb.PTTL(t.Context(), k).Val(); ttl <= 0 {
						t.Errorf("%s has no TTL (%v)", k, ttl)
					}
				}
			}
			ip := `{"limit":1,"window":60}`
			if status, _, got := doIdem(t, s, a, "/check/ip", "ip-1", ip, "X-Forwarded-For", "192.0.2.1"); status != http.StatusOK || got["allowed"] != true {
				t.Fatalf("the first address: %d %v", status, got)
			}
			if status, replayed, got := doIdem(t, s, a, "/check/ip", "ip-1", ip, "X-Forwarded-For", "192.0.2.2"); status != http.StatusUnprocessableEntity || replayed || got["code"] != "IDEMPOTENCY_KEY_REUSED" {
				t.Errorf("another address with the first one's key: %d replayed %v %v, want 422 IDEMPOTENCY_KEY_REUSED", status, replayed, got)
			}
			if _, replayed, _ := doIdem(t, s, a, "/check/ip", "ip-1", ip, "X-Forwarded-For", "192.0.2.1"); !replayed {
				t.Errorf("the first address's retry: not replayed")
			}
		})
	}
}

// clientID returns the id of key's client (GET /me).
func clientID(t *testing.T, s *throttletest.Server, key string) string {
	t.Helper()
	_, _, me := doJSON(t, "GET", s.URL+"/me", key, "")
	id, _ := me["client_id"].(string)
	if id == "" {
		t.Fatalf("GET /me: %v", me)
	}
	return id
}

// TestIdempotencyRedisBudget: past IDEMPOTENCY_REDIS_MEMORY_PERCENT of
// Redis's maxmemory no reply is kept (a retry is decided anew) while
// checks go on counting; without the budget the same Redis keeps it.
// Before, records were kept until Redis refused or evicted counters.
func TestIdempotencyRedisBudget(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	for _, tt := range []struct {
		percent string
		kept    bool
	}{{"1", false}, {"100", true}} {
		t.Run(tt.percent, func(t *testing.T) {
			s := throttletest.Start(t, "REDIS_URL="+srv.URL(), "DATABASE_URL="+freshPostgres(t), "IDEMPOTENCY_REDIS_MEMORY_PERCENT="+tt.percent)
			key := s.Register(t, "budget-"+tt.percent)
			body := `{"identifier":"u","limit":5,"window":60}`
			if status, _, got := doIdem(t, s, key, "/check", "k", body); status != http.StatusOK || got["remaining"] != float64(4) {
				t.Fatalf("first: %d %v", status, got)
			}
			status, replayed, got := doIdem(t, s, key, "/check", "k", body)
			if status != http.StatusOK || replayed != tt.kept {
				t.Errorf("retry: %d replayed %v %v, want replayed %v", status, replayed, got, tt.kept)
			}
			if !tt.kept && got["remaining"] != float64(3) {
				t.Errorf("retry past the budget: %v, want decided anew (remaining 3)", got)
			}
		})
	}
}
