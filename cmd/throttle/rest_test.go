package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/openapitest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The REST API for apps (issue 31) through the built binary.

// restSetups are the two deployments every test here runs on: the embedded
// default, and Redis + PostgreSQL. Their registrations count against a
// limit of their own (another REGISTER_LIMIT_PER_HOUR is another counter),
// never the 10 an hour of the other tests on the shared Redis.
func restSetups(t *testing.T) map[string][]string {
	t.Helper()
	const registrations = "REGISTER_LIMIT_PER_HOUR=100000"
	return map[string][]string{
		"embedded":       {registrations},
		"redis+postgres": {registrations, "REDIS_URL=" + redistest.SharedURL(t), "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"},
	}
}

// TestReasonRedisStopped: with Redis stopped, /check says the failure
// policy decided — reason failure_policy and RateLimit-Degraded: true —
// under each FAILURE_MODE; before, the same check is within_limit.
func TestReasonRedisStopped(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		allowed bool
	}{
		{"open", true},
		{"closed", false},
		{"local", true},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			s := throttletest.Start(t, "REDIS_URL="+rs.URL(), "FAILURE_MODE="+tt.mode)
			key := s.Register(t, "reason-"+tt.mode)
			body := `{"identifier":"u","limit":5,"window":60,"algorithm":"fixed_window"}`
			status, h, got := doJSON(t, "POST", s.URL+"/check", key, body)
			if status != http.StatusOK || got["reason"] != "within_limit" || h.Get("RateLimit-Degraded") != "" {
				t.Errorf("Redis up: %d reason %v RateLimit-Degraded %q; want 200 within_limit and none", status, got["reason"], h.Get("RateLimit-Degraded"))
			}
			rs.Stop()
			status, h, got = doJSON(t, "POST", s.URL+"/check", key, body)
			if status != http.StatusOK || got["reason"] != "failure_policy" || got["allowed"] != tt.allowed || h.Get("RateLimit-Degraded") != "true" {
				t.Errorf("Redis stopped: %d %v, RateLimit-Degraded %q; want 200 allowed %v reason failure_policy, header true",
					status, got, h.Get("RateLimit-Degraded"), tt.allowed)
			}
		})
	}
}

// restClient calls one server's REST API with one API key, and checks every
// exchange against the document the server serves at /openapi.json.
type restClient struct {
	url, key string
	http     *http.Client
}

func newRESTClient(t *testing.T, s *throttletest.Server, key string) *restClient {
	t.Helper()
	res, err := http.Get(s.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d, %v", res.StatusCode, err)
	}
	v := openapitest.New(t, doc)
	return &restClient{url: s.URL, key: key, http: &http.Client{Transport: v.Transport(t, nil), Timeout: 30 * time.Second}}
}

// do sends method path with a JSON body (when not empty) and header pairs,
// and decodes a JSON reply into out (when not nil).
func (c *restClient) do(t *testing.T, method, path, body string, out any, hdr ...string) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("%s %s: read: %v", method, path, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Errorf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return res.StatusCode, res.Header
}

// remaining peeks (hits 0) at what remains of an identifier's inline limit.
func (c *restClient) remaining(t *testing.T, identifier, limit string) int64 {
	t.Helper()
	var got struct{ Remaining int64 }
	if status, _ := c.do(t, "POST", "/check", `{"identifier":"`+identifier+`",`+limit+`,"hits":0}`, &got); status != http.StatusOK {
		t.Fatalf("peek %s: %d", identifier, status)
	}
	return got.Remaining
}

// TestBatchAllOrNothingConcurrent: 32 clients at once send batches of two
// checks, their own user's budget (1000) and one shared organisation's
// (40). Exactly 40 batches pass, and a refused batch counts nothing: the
// users' budgets together spent exactly 40, each exactly its own passes.
// Token buckets refilling 1 token a day, so nothing refills during the test.
func TestBatchAllOrNothingConcurrent(t *testing.T) {
	const workers, batches, orgLimit = 32, 6, 40
	for name, env := range restSetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			c := newRESTClient(t, s, s.Register(t, "batch-"+name))
			const slow = `"algorithm":"token_bucket","refill_rate":0.0000116`
			user := `"limit":1000,` + slow
			org := `"limit":40,` + slow
			passed := make([]int, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					body := fmt.Sprintf(`{"checks":[{"identifier":"user-%d",%s},{"identifier":"org",%s}]}`, w, user, org)
					for range batches {
						var got struct{ Allowed bool }
						if status, _ := c.do(t, "POST", "/check/batch", body, &got); status != http.StatusOK {
							t.Errorf("batch: status %d", status)
						}
						if got.Allowed {
							passed[w]++
						}
					}
				})
			}
			wg.Wait()
			total, spent := 0, int64(0)
			for w := range workers {
				total += passed[w]
				used := 1000 - c.remaining(t, fmt.Sprintf("user-%d", w), user)
				if used != int64(passed[w]) {
					t.Errorf("user-%d spent %d, want %d (its batches that passed)", w, used, passed[w])
				}
				spent += used
			}
			if total != orgLimit || spent != orgLimit {
				t.Errorf("%d batches passed, the users spent %d; want exactly %d each", total, spent, orgLimit)
			}
			if left := c.remaining(t, "org", org); left != 0 {
				t.Errorf("org has %d left, want 0", left)
			}
		})
	}
}

// TestIdempotentRetryConcurrent: 24 requests with one Idempotency-Key at
// once count once and get one reply; on Redis + PostgreSQL they are spread
// over two replicas, which share the key through Redis.
func TestIdempotentRetryConcurrent(t *testing.T) {
	for name, env := range restSetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env = append(env, "CACHE_REFRESH_INTERVAL=100ms")
			servers := []*throttletest.Server{throttletest.Start(t, env...)}
			if name != "embedded" {
				servers = append(servers, throttletest.Start(t, env...))
			}
			key := servers[0].Register(t, "idem-"+name)
			clients := make([]*restClient, len(servers))
			for i, s := range servers {
				clients[i] = newRESTClient(t, s, key)
			}
			waitForKey(t, clients)
			body := `{"identifier":"order-user","limit":50,"window":3600,"algorithm":"fixed_window"}`
			const n = 24
			bodies := make([]string, n)
			replayed := make([]bool, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					var got map[string]any
					status, h := clients[i%len(clients)].do(t, "POST", "/check", body, &got, "Idempotency-Key", "order-77")
					b, _ := json.Marshal(got)
					bodies[i], replayed[i] = fmt.Sprint(status, string(b)), h.Get("Idempotent-Replayed") == "true"
				})
			}
			wg.Wait()
			count := 0
			for i := range n {
				if bodies[i] != bodies[0] || !strings.Contains(bodies[i], `"remaining":49`) {
					t.Errorf("reply %d = %s, want %s with remaining 49", i, bodies[i], bodies[0])
				}
				if !replayed[i] {
					count++
				}
			}
			if count != 1 {
				t.Errorf("%d replies not replayed, want 1", count)
			}
			if left := clients[0].remaining(t, "order-user", `"limit":50,"window":3600,"algorithm":"fixed_window"`); left != 49 {
				t.Errorf("remaining %d, want 49: the key counted once", left)
			}
			var e struct{ Code string }
			if status, _ := clients[len(clients)-1].do(t, "POST", "/check", strings.Replace(body, "50", "51", 1), &e, "Idempotency-Key", "order-77"); status != http.StatusUnprocessableEntity || e.Code != "IDEMPOTENCY_KEY_REUSED" {
				t.Errorf("another body with the key: %d %s, want 422 IDEMPOTENCY_KEY_REUSED", status, e.Code)
			}
		})
	}
}

// waitForKey waits until every replica knows the API key (cache refresh).
func waitForKey(t *testing.T, clients []*restClient) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range clients {
		for {
			status, _ := c.do(t, "GET", "/me", "", nil)
			if status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the key is unknown to a replica after 10s: %d", status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestCORSAndListFormat: preflights from an allowed and from a refused
// origin, the exposed rate-limit headers, and both list formats.
func TestCORSAndListFormat(t *testing.T) {
	const app = "https://app.example.com"
	for name, env := range restSetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			arrays := throttletest.Start(t, append(env, "CORS_ALLOWED_ORIGIN="+app)...)
			key := arrays.Register(t, "cors-"+name)
			c := newRESTClient(t, arrays, key)
			preflight := func(origin string) *http.Response {
				req, _ := http.NewRequest("OPTIONS", arrays.URL+"/check", nil)
				req.Header.Set("Origin", origin)
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "x-api-key, content-type, idempotency-key")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res
			}
			res := preflight(app)
			allowHeaders := strings.ToLower(res.Header.Get("Access-Control-Allow-Headers"))
			if res.StatusCode != http.StatusNoContent || res.Header.Get("Access-Control-Allow-Origin") != app ||
				res.Header.Get("Access-Control-Allow-Methods") != "POST" || !strings.Contains(allowHeaders, "idempotency-key") || !strings.Contains(allowHeaders, "x-api-key") {
				t.Errorf("preflight from %s: %d %v", app, res.StatusCode, res.Header)
			}
			res = preflight("https://elsewhere.example.com")
			for k := range res.Header {
				if strings.HasPrefix(k, "Access-Control-") {
					t.Errorf("preflight from an origin not listed has %s", k)
				}
			}
			_, h := c.do(t, "POST", "/check", `{"identifier":"u","limit":5,"window":60}`, nil, "Origin", app)
			if h.Get("Access-Control-Allow-Origin") != app || !strings.Contains(h.Get("Access-Control-Expose-Headers"), "RateLimit-Policy") {
				t.Errorf("POST /check from %s: CORS headers %v", app, h)
			}
			c.do(t, "POST", "/rules", `{"name":"api","limit":5,"window":60}`, nil)
			var rules []map[string]any
			if status, _ := c.do(t, "GET", "/rules/list", "", &rules); status != http.StatusOK || len(rules) != 1 {
				t.Errorf("default /rules/list: %d %v, want one rule in an array", status, rules)
			}

			objects := throttletest.Start(t, append(env, "LIST_RESPONSE_FORMAT=object")...)
			oc := newRESTClient(t, objects, objects.Register(t, "lists-"+name))
			oc.do(t, "POST", "/rules", `{"name":"api","limit":5,"window":60}`, nil)
			oc.do(t, "POST", "/exemptions", `{"identifier":"ops"}`, nil)
			var ro struct{ Rules []map[string]any }
			var eo struct{ Exemptions []map[string]any }
			oc.do(t, "GET", "/rules/list", "", &ro)
			oc.do(t, "GET", "/exemptions/list", "", &eo)
			if len(ro.Rules) != 1 || len(eo.Exemptions) != 1 {
				t.Errorf("LIST_RESPONSE_FORMAT=object: rules %v, exemptions %v; want one of each under its field", ro, eo)
			}
		})
	}
}

// TestOverridePrecedence: a rule's overrides through the built binary, on
// /check and on the Envoy requests the rule matches: exact beats a
// pattern, the longest prefix beats a shorter one, the rule's limit for
// the rest; the reply names the override.
func TestOverridePrecedence(t *testing.T) {
	for name, env := range restSetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, append(env, "CLAIMABLE_DOMAINS=overrides-*")...)
			// A domain of this run's (a domain has no '+'): the shared
			// Redis keeps an earlier run's Envoy counters (go test -count=2).
			domain := "overrides-" + strings.ReplaceAll(name, "+", "-") + "-" + testkit.RandomHex(t, 4)
			c := newRESTClient(t, s, s.RegisterDomain(t, "overrides-"+name, domain, ""))
			var me struct{ Domain string }
			c.do(t, "GET", "/me", "", &me)
			for _, body := range []string{
				`{"name":"api","algorithm":"fixed_window","limit":2,"window":3600}`,
				`{"name":"tenants","algorithm":"fixed_window","limit":2,"window":3600,"descriptors":[{"key":"tenant"}]}`,
			} {
				if status, _ := c.do(t, "POST", "/rules", body, nil); status != http.StatusCreated {
					t.Fatalf("POST /rules %s: %d", body, status)
				}
			}
			for _, rule := range []string{"api", "tenants"} {
				for _, o := range []string{`{"identifier":"acme","limit":5}`, `{"identifier":"ac*","limit":4}`, `{"identifier":"acme-eu*","limit":3}`} {
					if status, _ := c.do(t, "POST", "/rules/"+rule+"/overrides", o, nil); status != http.StatusCreated {
						t.Fatalf("POST /rules/%s/overrides %s: %d", rule, o, status)
					}
				}
			}
			rls := rlsClient(t, s)
			for _, tt := range []struct {
				identifier, override string
				limit                int
			}{{"acme", "acme", 5}, {"acme-eu-1", "acme-eu*", 3}, {"acme-us", "ac*", 4}, {"zeta", "", 2}} {
				allowed := 0
				for range tt.limit + 2 {
					var got struct {
						Allowed  bool
						Limit    int
						Override string
					}
					c.do(t, "POST", "/check", `{"identifier":"`+tt.identifier+`","rule":"api"}`, &got)
					if got.Limit != tt.limit || got.Override != tt.override {
						t.Errorf("/check %s: limit %d override %q, want %d %q", tt.identifier, got.Limit, got.Override, tt.limit, tt.override)
					}
					if got.Allowed {
						allowed++
					}
				}
				if allowed != tt.limit {
					t.Errorf("/check %s: %d allowed, want %d", tt.identifier, allowed, tt.limit)
				}
				ok := 0
				for range tt.limit + 2 {
					resp := askRLS(t, rls, me.Domain, rlsDesc("tenant", tt.identifier))
					if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != uint32(tt.limit) {
						t.Errorf("Envoy %s: current limit %d, want %d", tt.identifier, got, tt.limit)
					}
					if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
						ok++
					}
				}
				if ok != tt.limit {
					t.Errorf("Envoy %s: %d OK, want %d", tt.identifier, ok, tt.limit)
				}
			}
		})
	}
}

// TestRefundNeverBelowZero: "hits": -N through the built binary gives back
// what was used and never more, in every algorithm.
func TestRefundNeverBelowZero(t *testing.T) {
	for name, env := range restSetups(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := throttletest.Start(t, env...)
			c := newRESTClient(t, s, s.Register(t, "refund-"+name))
			for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket", "gcra"} {
				limit := `"limit":5,"window":3600,"algorithm":"` + alg + `"`
				check := func(hits int) (bool, int64) {
					var got struct {
						Allowed   bool
						Remaining int64
					}
					if status, _ := c.do(t, "POST", "/check", fmt.Sprintf(`{"identifier":"u",%s,"hits":%d}`, limit, hits), &got); status != http.StatusOK {
						t.Fatalf("%s hits %d: %d", alg, hits, status)
					}
					return got.Allowed, got.Remaining
				}
				for _, step := range []struct {
					hits      int
					allowed   bool
					remaining int64
				}{{-3, true, 5}, {4, true, 1}, {2, false, 1}, {-2, true, 3}, {-50, true, 5}, {5, true, 0}, {1, false, 0}} {
					if allowed, remaining := check(step.hits); allowed != step.allowed || remaining != step.remaining {
						t.Errorf("%s: hits %d = allowed %v, %d left; want %v, %d", alg, step.hits, allowed, remaining, step.allowed, step.remaining)
					}
				}
			}
		})
	}
}
