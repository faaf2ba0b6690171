package restapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/store"
)

func TestHealthAndReady(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		r := e.call(t, "GET", "/health", "", "")
		if r.status != http.StatusOK || r.body != "{\"status\":\"ok\"}\n" {
			t.Errorf("GET /health = %d %q, want 200 {\"status\":\"ok\"}", r.status, r.body)
		}
		r = e.call(t, "GET", "/ready", "", "")
		if r.status != http.StatusOK {
			t.Errorf("GET /ready = %d %s, want 200", r.status, r.body)
		}
		got := decodeReply[readyReply](t, r)
		if got.Status != "ready" || got.Checks["database"] != "ok" || got.Checks["limiter"] != "ok" {
			t.Errorf("GET /ready = %+v", got)
		}
	})
}

// TestReadyLimiterDown: with Redis down, readiness asks Redis itself (as
// the binary wires it: LimiterReady asks the store the Guard wraps), so it
// says so under every FAILURE_MODE, 503 only under closed, and the probes
// are no decisions: the Guard counts none by policy.
func TestReadyLimiterDown(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode       algorithms.FailureMode
		wantStatus int
		want       string
	}{
		{algorithms.FailOpen, http.StatusOK, `{"status":"degraded","checks":{"database":"ok","limiter":"degraded: redis down"}}`},
		{algorithms.FailLocal, http.StatusOK, `{"status":"degraded","checks":{"database":"ok","limiter":"degraded: redis down"}}`},
		{algorithms.FailClosed, http.StatusServiceUnavailable, `{"status":"unavailable","checks":{"database":"ok","limiter":"unavailable: redis down"}}`},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			dead := deadRedis(t)
			reg := prometheus.NewRegistry()
			g, err := redisstore.NewGuard(dead, redisstore.GuardOptions{Mode: tt.mode, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, backends()[0], func(d *Deps) { d.Limiter, d.LimiterReady, d.FailureMode = g, dead.Ready, tt.mode })
			for range 3 {
				r := e.call(t, "GET", "/ready", "", "")
				if r.status != tt.wantStatus || r.body != tt.want+"\n" {
					t.Errorf("GET /ready with Redis down = %d %s, want %d %s", r.status, r.body, tt.wantStatus, tt.want)
				}
			}
			if got := counterValue(t, reg, "throttle_degraded_decisions_total", map[string]string{"mode": string(tt.mode)}); got != 0 {
				t.Errorf("throttle_degraded_decisions_total = %v after 3 probes, want 0", got)
			}
			if !strings.Contains(e.logs.String(), "readiness: counter backend") {
				t.Errorf("the cause is not logged:\n%s", e.logs)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		before := time.Now().Add(-time.Second)
		r := e.call(t, "POST", "/register", "", `{"name":"My App","email":"Dev@Example.com","default_algorithm":"token_bucket"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /register = %d %s, want 201", r.status, r.body)
		}
		if cc := r.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", cc)
		}
		got := decodeReply[registerReply](t, r)
		if !regexp.MustCompile(`^thr_[0-9a-f]{64}$`).MatchString(got.APIKey) {
			t.Errorf("api_key = %q, want thr_ and 64 hex digits", got.APIKey)
		}
		if !regexp.MustCompile(`^[0-9a-f-]{36}$`).MatchString(got.ClientID) {
			t.Errorf("client_id = %q, want a UUID", got.ClientID)
		}
		if got.Name != "My App" || got.Email != "dev@example.com" || got.Domain != "" || got.DefaultAlgorithm != "token_bucket" {
			t.Errorf("reply = %+v, want name My App, email dev@example.com, no domain, token_bucket", got)
		}
		if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("created_at = %v, want about now", got.CreatedAt)
		}

		// Only the SHA-256 of the key is stored, and the key works at once.
		stored, err := e.db.ClientByKeyHash(context.Background(), sha256.Sum256([]byte(got.APIKey)))
		if err != nil || stored.ID != got.ClientID {
			t.Errorf("ClientByKeyHash(sha256(key)) = %+v, %v; want client %s", stored, err, got.ClientID)
		}
		me := e.call(t, "GET", "/me", got.APIKey, "")
		if me.status != http.StatusOK {
			t.Fatalf("GET /me = %d %s", me.status, me.body)
		}
		if strings.Contains(me.body, got.APIKey) || strings.Contains(me.body, "api_key") {
			t.Errorf("GET /me shows the key: %s", me.body)
		}
		gotMe := decodeReply[meReply](t, me)
		if gotMe.ClientID != got.ClientID || gotMe.Name != "My App" || gotMe.Email != "dev@example.com" || gotMe.Domain != "" || gotMe.DefaultAlgorithm != "token_bucket" || !gotMe.CreatedAt.Equal(got.CreatedAt) {
			t.Errorf("GET /me = %+v, want the registered client %+v", gotMe, got)
		}

		// The default algorithm defaults to sliding_window; the operator
		// grants a domain (domains_test.go).
		r = e.call(t, "POST", "/register", testAdminKey, `{"name":"Other","email":"other@example.com","domain":"edge.example"}`)
		other := decodeReply[registerReply](t, r)
		if r.status != http.StatusCreated || other.DefaultAlgorithm != "sliding_window" || other.Domain != "edge.example" {
			t.Errorf("POST /register = %d %s, want 201, sliding_window, domain edge.example", r.status, r.body)
		}
		if other.APIKey == got.APIKey {
			t.Errorf("two registrations got the same key")
		}

		for _, tt := range []struct {
			name, body string
			status     int
			code       string
		}{
			{"duplicate domain", `{"name":"Again","email":"again@example.com","domain":"edge.example"}`, 409, "CONFLICT"},
			{"missing name", `{"email":"x@example.com"}`, 400, "MISSING_FIELD"},
			{"missing email", `{"name":"x"}`, 400, "MISSING_FIELD"},
			{"bad email", `{"name":"x","email":"nope"}`, 400, "INVALID_FIELD"},
			{"bad domain", `{"name":"x","email":"x@example.com","domain":"Not A Domain"}`, 400, "INVALID_FIELD"},
			{"bad algorithm", `{"name":"x","email":"x@example.com","default_algorithm":"leaky_bucket"}`, 400, "INVALID_FIELD"},
			{"unknown field", `{"name":"x","email":"x@example.com","emial":"y"}`, 400, "UNKNOWN_FIELD"},
			{"wrong type", `{"name":7,"email":"x@example.com"}`, 400, "INVALID_FIELD"},
			{"not JSON", `name=x`, 400, "INVALID_JSON"},
			{"JSON sent as a form", `{"name":"x","email":"x@example.com"}`, 415, "UNSUPPORTED_MEDIA_TYPE"},
			{"truncated", `{"name":"x"`, 400, "INVALID_JSON"},
			{"array", `[]`, 400, "INVALID_JSON"},
			{"two objects", `{"name":"x","email":"x@example.com"}{}`, 400, "INVALID_JSON"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				var hdr []string
				if tt.status == 415 {
					hdr = []string{"Content-Type", "application/x-www-form-urlencoded"}
				}
				wantError(t, e.call(t, "POST", "/register", testAdminKey, tt.body, hdr...), tt.status, tt.code)
			})
		}
		wantError(t, e.call(t, "POST", "/register", "", "", "Content-Type", "application/json"), 400, "INVALID_JSON")
		wantError(t, e.call(t, "POST", "/register", "", ""), 415, "UNSUPPORTED_MEDIA_TYPE")
	})
}

func TestRegisterMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	for _, tt := range []struct{ body, want string }{
		{`{"name":"x","email":"x@example.com","windwo":1}`, `{"error":"unknown field \"windwo\"","code":"UNKNOWN_FIELD"}`},
		{`{"name":7}`, `{"error":"field \"name\" must be a string, not number","code":"INVALID_FIELD"}`},
		{`{"name":"x","email":"nope"}`, `{"error":"email must contain exactly one '@'","code":"INVALID_FIELD"}`},
	} {
		r := e.call(t, "POST", "/register", "", tt.body)
		if strings.TrimSpace(r.body) != tt.want {
			t.Errorf("POST /register %s: body = %s, want %s", tt.body, r.body, tt.want)
		}
	}
}

func TestRegisterRateLimitedPerIP(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(d *Deps) {
			d.RegisterLimit = algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
			d.TrustedProxies = mustPrefixes(t, "127.0.0.0/8", "::1/128")
		})
		ip := "198.51.100." + randomIPByte()
		for i := range 2 {
			r := e.call(t, "POST", "/register", "", `{"name":"r","email":"r`+testkit.RandomHex(t, 4)+`@example.com"}`, "X-Forwarded-For", ip)
			if r.status != http.StatusCreated {
				t.Fatalf("registration %d from %s = %d %s, want 201", i+1, ip, r.status, r.body)
			}
		}
		r := e.call(t, "POST", "/register", "", `{"name":"r","email":"r`+testkit.RandomHex(t, 4)+`@example.com"}`, "X-Forwarded-For", ip)
		wantError(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
		if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After = %q, want a positive number of seconds", ra)
		}
		// Another address is not affected.
		r = e.call(t, "POST", "/register", "", `{"name":"r","email":"r`+testkit.RandomHex(t, 4)+`@example.com"}`, "X-Forwarded-For", "2001:db8:"+testkit.RandomHex(t, 2)+"::"+randomIPByte())
		if r.status != http.StatusCreated {
			t.Errorf("registration from another address = %d %s, want 201", r.status, r.body)
		}
	})
}

// TestRegisterLimitedPerSubnet: the registration limit counts an IPv6
// caller by its /64 (any of 2^64 addresses is one host's for the asking;
// it counted each address alone) and an IPv4-mapped IPv6 address as its
// IPv4 address.
func TestRegisterLimitedPerSubnet(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(d *Deps) {
			d.RegisterLimit = algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
			d.TrustedProxies = mustPrefixes(t, "127.0.0.0/8", "::1/128")
		})
		register := func(from string) reply {
			t.Helper()
			return e.call(t, "POST", "/register", "", `{"name":"r","email":"r`+testkit.RandomHex(t, 4)+`@example.com"}`, "X-Forwarded-For", from)
		}
		net64 := "2001:db8:" + testkit.RandomHex(t, 2) + ":" + testkit.RandomHex(t, 2)
		for _, tt := range []struct{ from, within, limited string }{
			{net64 + "::1", net64 + ":0:ffff:1234:5", netip.MustParsePrefix(net64 + "::/64").String()},
			{"198.51.100." + randomIPByte(), "", ""},
		} {
			second, third := tt.within, "::ffff:"+tt.from
			if tt.within == "" { // IPv4: the mapped address is the same caller
				second = "::ffff:" + tt.from
			}
			for i, from := range []string{tt.from, second} {
				if r := register(from); r.status != http.StatusCreated {
					t.Fatalf("registration %d from %s = %d %s, want 201", i+1, from, r.status, r.body)
				}
			}
			if tt.within != "" {
				third = net64 + ":abcd:ef01:2345:6789"
			}
			r := register(third)
			wantError(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
			limited := tt.limited
			if limited == "" {
				limited = tt.from
			}
			if want := "too many registrations from " + limited + "; retry in "; !strings.HasPrefix(decodeReply[errorReply](t, r).Error, want) {
				t.Errorf("third registration from %s: %s, want %s…", third, r.body, want)
			}
		}
		// Another /64 is not affected.
		if r := register("2001:db8:" + testkit.RandomHex(t, 2) + ":1::1"); r.status != http.StatusCreated {
			t.Errorf("registration from another /64 = %d %s, want 201", r.status, r.body)
		}
	})
}

// TestRegisterMaxClients: past MAX_CLIENTS clients in all, a registration
// is 409 TOO_MANY_CLIENTS, the operator's too, so the per-client caps bound
// the whole; deleting none, nothing more is made.
func TestRegisterMaxClients(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(d *Deps) { d.DB.SetQuotas(store.Quotas{Clients: 2}) })
		e.register(t, "one")
		e.register(t, "two")
		for _, key := range []string{"", e.adminKey} {
			r := e.call(t, "POST", "/register", key, `{"name":"three","email":"three-`+testkit.RandomHex(t, 4)+`@example.com"}`)
			wantError(t, r, http.StatusConflict, "TOO_MANY_CLIENTS")
			if got, want := decodeReply[errorReply](t, r).Error, "Throttle has 2 clients, the most it takes (MAX_CLIENTS): no more registrations until the operator deletes some or raises it"; got != want {
				t.Errorf("error = %q, want %q", got, want)
			}
		}
	})
}

func TestAuthentication(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "auth")
		for _, path := range []string{"/me", "/rules/list", "/exemptions/list", "/stats/" + c.ID} {
			r := e.call(t, "GET", path, "", "")
			wantError(t, r, http.StatusUnauthorized, "MISSING_API_KEY")
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s without key: no WWW-Authenticate header", path)
			}
			wantError(t, e.call(t, "GET", path, "thr_"+strings.Repeat("0", 64), ""), http.StatusUnauthorized, "INVALID_API_KEY")
		}
		for _, path := range []string{"/check", "/check/ip", "/reset", "/rules", "/exemptions"} {
			wantError(t, e.call(t, "POST", path, "", `{}`), http.StatusUnauthorized, "MISSING_API_KEY")
		}
		for _, h := range []string{"Bearer " + c.Key, "bearer " + c.Key} {
			r := e.call(t, "GET", "/me", "", "", "Authorization", h)
			if r.status != http.StatusOK {
				t.Errorf("GET /me with Authorization %q = %d %s, want 200", h[:7], r.status, r.body)
			}
		}
		wantError(t, e.call(t, "GET", "/me", "", "", "Authorization", "Basic "+c.Key), http.StatusUnauthorized, "MISSING_API_KEY")
	})
}

func TestAPIKeyNeverLogged(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "secret")
		e.check(t, c, `{"identifier":"u","limit":5,"window":60}`)
		e.call(t, "GET", "/me", "", "", "Authorization", "Bearer "+c.Key)
		e.call(t, "POST", "/check", c.Key, `{"bad json`)
		e.call(t, "GET", "/nowhere", c.Key, "")
		logs := e.logs.String()
		if strings.Contains(logs, c.Key) || strings.Contains(logs, strings.TrimPrefix(c.Key, "thr_")) {
			t.Errorf("the API key appears in the logs:\n%s", logs)
		}
		for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
			if strings.Contains(line, `"msg":"request"`) && !strings.Contains(line, `"request_id":"`) {
				t.Errorf("access log line without request_id: %s", line)
			}
		}
		if !strings.Contains(logs, `"client_id":"`+c.ID+`"`) {
			t.Errorf("no log line names client_id %s:\n%s", c.ID, logs)
		}
	})
}

// randomIPByte returns a random decimal 1..250, for test addresses that no
// other test (or earlier run against the same Redis) uses.
func randomIPByte() string {
	var b [1]byte
	rand.Read(b[:])
	return strconv.Itoa(1 + int(b[0])%250)
}
