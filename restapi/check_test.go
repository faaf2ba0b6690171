package restapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

func TestCheckDecisionsAndHeaders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "check")
		body := `{"identifier":"user_123","limit":3,"window":60,"algorithm":"fixed_window"}`
		resetAt := testNow.Truncate(time.Minute).Add(time.Minute).Unix() // the window's end
		for i := range 3 {
			got, r := e.check(t, c, body)
			want := checkReply{Allowed: true, Identifier: "user_123", Limit: 3, Remaining: int64(2 - i), Algorithm: "fixed_window", ResetAt: resetAt, Warning: i == 2, Reason: "within_limit"}
			if got != want {
				t.Errorf("check %d = %+v, want %+v", i+1, got, want)
			}
			h := r.header
			if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) ||
				h.Get("X-RateLimit-Reset") != strconv.FormatInt(got.ResetAt, 10) || h.Get("X-RateLimit-Algorithm") != "fixed_window" {
				t.Errorf("check %d headers = %v", i+1, h)
			}
			if _, ok := h["Retry-After"]; ok {
				t.Errorf("check %d allowed but has Retry-After", i+1)
			}
			// 2/3 and 1/3 are not below 0.2; 0/3 is.
			if wantWarn := i == 2; got.Warning != wantWarn || (h.Get("X-RateLimit-Warning") == "true") != wantWarn {
				t.Errorf("check %d: warning %v, header %q; want %v", i+1, got.Warning, h.Get("X-RateLimit-Warning"), wantWarn)
			}
		}
		got, r := e.check(t, c, body)
		want := checkReply{Identifier: "user_123", Limit: 3, Remaining: 0, ResetAt: resetAt, RetryAfter: 30, Algorithm: "fixed_window", Warning: true, Reason: "rate_limited"}
		if got != want {
			t.Errorf("4th check = %+v, want %+v", got, want)
		}
		if r.header.Get("Retry-After") != strconv.FormatInt(got.RetryAfter, 10) {
			t.Errorf("Retry-After = %q, want %d", r.header.Get("Retry-After"), got.RetryAfter)
		}

		// warn_threshold: remaining 7 of 10 is below 0.75 but not below 0.5.
		for _, tt := range []struct {
			threshold string
			want      bool
		}{{"0.5", false}, {"0.75", true}} {
			got, r := e.check(t, c, `{"identifier":"w`+tt.threshold+`","limit":10,"window":60,"hits":3,"warn_threshold":`+tt.threshold+`}`)
			if got.Remaining != 7 || got.Warning != tt.want || (r.header.Get("X-RateLimit-Warning") == "true") != tt.want {
				t.Errorf("warn_threshold %s: remaining %d warning %v header %q, want 7 and %v", tt.threshold, got.Remaining, got.Warning, r.header.Get("X-RateLimit-Warning"), tt.want)
			}
		}

		// hits 0 reads without counting; hits 2 takes two.
		e.check(t, c, `{"identifier":"h","limit":5,"window":60,"algorithm":"sliding_window","hits":2}`)
		got, _ = e.check(t, c, `{"identifier":"h","limit":5,"window":60,"algorithm":"sliding_window","hits":0}`)
		if !got.Allowed || got.Remaining != 3 {
			t.Errorf("peek = %+v, want allowed with remaining 3", got)
		}
		got, _ = e.check(t, c, `{"identifier":"h","limit":5,"window":60,"algorithm":"sliding_window","hits":4}`)
		if got.Allowed || got.Remaining != 3 {
			t.Errorf("hits 4 of remaining 3 = %+v, want rejected, remaining still 3", got)
		}

		// Token bucket needs no window; the refill rate may be given.
		got, _ = e.check(t, c, `{"identifier":"tb","limit":2,"algorithm":"token_bucket"}`)
		if !got.Allowed || got.Algorithm != "token_bucket" || got.Remaining != 1 {
			t.Errorf("token bucket = %+v, want allowed, remaining 1", got)
		}
		got, _ = e.check(t, c, `{"identifier":"tb2","limit":2,"algorithm":"token_bucket","refill_rate":0.5}`)
		if !got.Allowed || got.Remaining != 1 {
			t.Errorf("token bucket with refill_rate = %+v, want allowed, remaining 1", got)
		}
	})
}

// TestCheckGCRA: gcra inline, as a client's default, in a rule and in
// /reset. 3 per 60 s is one hit every 20 s.
func TestCheckGCRA(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "gcra")
		body := `{"identifier":"cell","limit":3,"window":60,"algorithm":"gcra"}`
		for i := range 3 {
			got, r := e.check(t, c, body)
			// Reset: until TAT, 20 s per hit taken.
			want := checkReply{Allowed: true, Identifier: "cell", Limit: 3, Remaining: int64(2 - i), Algorithm: "gcra",
				ResetAt: testNow.Add(time.Duration(i+1) * 20 * time.Second).Unix(), Warning: i == 2, Reason: "within_limit"}
			if got != want {
				t.Errorf("check %d = %+v, want %+v", i+1, got, want)
			}
			if h := r.header.Get("X-RateLimit-Algorithm"); h != "gcra" {
				t.Errorf("check %d: X-RateLimit-Algorithm = %q, want gcra", i+1, h)
			}
		}
		got, r := e.check(t, c, body)
		want := checkReply{Identifier: "cell", Limit: 3, Remaining: 0, ResetAt: testNow.Add(time.Minute).Unix(), RetryAfter: 20, Algorithm: "gcra", Warning: true, Reason: "rate_limited"}
		if got != want || r.header.Get("Retry-After") != "20" {
			t.Errorf("4th check = %+v, Retry-After %q; want %+v, 20", got, r.header.Get("Retry-After"), want)
		}
		if got, _ := e.check(t, c, `{"identifier":"cell","limit":3,"window":60,"algorithm":"gcra","hits":0}`); !got.Allowed || got.Remaining != 0 {
			t.Errorf("peek = %+v, want allowed with remaining 0", got)
		}

		r = e.call(t, "POST", "/reset", c.Key, `{"identifier":"cell","algorithm":"gcra"}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"keys_deleted":1`) {
			t.Errorf("POST /reset gcra = %d %s, want 1 key deleted", r.status, r.body)
		}
		if got, _ := e.check(t, c, body); !got.Allowed || got.Remaining != 2 {
			t.Errorf("after reset = %+v, want allowed with remaining 2", got)
		}

		d := e.register(t, "gcra-default", `"default_algorithm":"gcra"`)
		if got, _ := e.check(t, d, `{"identifier":"u","limit":10,"window":60}`); got.Algorithm != "gcra" || got.Remaining != 9 {
			t.Errorf("check = %+v, want the client's default gcra, remaining 9", got)
		}
		wantError(t, e.call(t, "POST", "/check", d.Key, `{"identifier":"u","limit":10}`), 400, "MISSING_FIELD")
		r = e.call(t, "POST", "/rules", d.Key, `{"name":"cells","limit":2,"window":60}`)
		if r.status != http.StatusCreated || decodeReply[ruleReply](t, r).Algorithm != "gcra" {
			t.Fatalf("POST /rules without algorithm = %d %s, want 201 with the default gcra", r.status, r.body)
		}
		for i := range 3 {
			got, _ := e.check(t, d, `{"identifier":"u","rule":"cells"}`)
			if got.Algorithm != "gcra" || got.Rule != "cells" || got.Allowed != (i < 2) {
				t.Errorf("check %d with rule = %+v, want gcra, allowed %v", i+1, got, i < 2)
			}
		}
	})
}

// TestAlgorithmMessagesListEveryAlgorithm: every message that lists the
// algorithms spells algorithms.Names, the one list.
func TestAlgorithmMessagesListEveryAlgorithm(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "names")
		for _, req := range []struct{ path, key, body string }{
			{"/register", "", `{"name":"x","email":"x@example.com","default_algorithm":"leaky_bucket"}`},
			{"/rules", c.Key, `{"name":"x","algorithm":"leaky_bucket","limit":1,"window":1}`},
			{"/check", c.Key, `{"identifier":"u","limit":1,"window":1,"algorithm":"leaky_bucket"}`},
			{"/reset", c.Key, `{"identifier":"u","algorithm":"leaky_bucket"}`},
		} {
			r := e.call(t, "POST", req.path, req.key, req.body)
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, algorithms.Names()) {
				t.Errorf("POST %s = %d %s, want 400 listing %s", req.path, r.status, r.body, algorithms.Names())
			}
		}
	})
}

func TestCheckDefaultAlgorithm(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		tb := e.register(t, "tb", `"default_algorithm":"token_bucket"`)
		got, _ := e.check(t, tb, `{"identifier":"u","limit":10}`)
		if got.Algorithm != "token_bucket" {
			t.Errorf("algorithm = %q, want the client's default token_bucket", got.Algorithm)
		}
		sw := e.register(t, "sw")
		got, _ = e.check(t, sw, `{"identifier":"u","limit":10,"window":60}`)
		if got.Algorithm != "sliding_window" {
			t.Errorf("algorithm = %q, want the default sliding_window", got.Algorithm)
		}
		wantError(t, e.call(t, "POST", "/check", sw.Key, `{"identifier":"u","limit":10}`), 400, "MISSING_FIELD")
	})
}

func TestCheckValidation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "validation")
		long := strings.Repeat("x", 257)
		for _, tt := range []struct {
			name, body string
			status     int
			code       string
		}{
			{"missing identifier", `{"limit":10,"window":60}`, 400, "MISSING_FIELD"},
			{"empty identifier", `{"identifier":"","limit":10,"window":60}`, 400, "MISSING_FIELD"},
			{"identifier too long", `{"identifier":"` + long + `","limit":10,"window":60}`, 400, "INVALID_FIELD"},
			{"missing limit", `{"identifier":"u","window":60}`, 400, "MISSING_FIELD"},
			{"zero limit", `{"identifier":"u","limit":0,"window":60}`, 400, "INVALID_FIELD"},
			{"negative limit", `{"identifier":"u","limit":-1,"window":60}`, 400, "INVALID_FIELD"},
			{"huge limit", `{"identifier":"u","limit":1000000000001,"window":60}`, 400, "INVALID_FIELD"},
			{"fractional limit", `{"identifier":"u","limit":1.5,"window":60}`, 400, "INVALID_FIELD"},
			{"limit as string", `{"identifier":"u","limit":"10","window":60}`, 400, "INVALID_FIELD"},
			{"missing window", `{"identifier":"u","limit":10,"algorithm":"fixed_window"}`, 400, "MISSING_FIELD"},
			{"zero window", `{"identifier":"u","limit":10,"window":0}`, 400, "INVALID_FIELD"},
			{"huge window", `{"identifier":"u","limit":10,"window":999999999}`, 400, "INVALID_FIELD"},
			{"bad algorithm", `{"identifier":"u","limit":10,"window":60,"algorithm":"leaky_bucket"}`, 400, "INVALID_FIELD"},
			{"warn_threshold 0", `{"identifier":"u","limit":10,"window":60,"warn_threshold":0}`, 400, "INVALID_FIELD"},
			{"warn_threshold 1", `{"identifier":"u","limit":10,"window":60,"warn_threshold":1}`, 400, "INVALID_FIELD"},
			{"warn_threshold 1.5", `{"identifier":"u","limit":10,"window":60,"warn_threshold":1.5}`, 400, "INVALID_FIELD"},
			{"warn_threshold negative", `{"identifier":"u","limit":10,"window":60,"warn_threshold":-0.1}`, 400, "INVALID_FIELD"},
			{"refill_rate 0", `{"identifier":"u","limit":10,"algorithm":"token_bucket","refill_rate":0}`, 400, "INVALID_FIELD"},
			{"refill_rate negative", `{"identifier":"u","limit":10,"algorithm":"token_bucket","refill_rate":-1}`, 400, "INVALID_FIELD"},
			{"refill_rate huge", `{"identifier":"u","limit":10,"algorithm":"token_bucket","refill_rate":1e300}`, 400, "INVALID_FIELD"},
			{"gcra without window", `{"identifier":"u","limit":10,"algorithm":"gcra"}`, 400, "MISSING_FIELD"},
			// lcm(999999937, 366 days in µs) is beyond 2^53: not countable exactly.
			{"gcra too fine", `{"identifier":"u","limit":999999937,"window":31622400,"algorithm":"gcra"}`, 400, "INVALID_FIELD"},
			{"hits below the refund bound", `{"identifier":"u","limit":10,"window":60,"hits":-1000000000001}`, 400, "INVALID_FIELD"},
			{"typo", `{"identifier":"u","limit":10,"windwo":60}`, 400, "UNKNOWN_FIELD"},
			{"unknown rule", `{"identifier":"u","rule":"nope"}`, 404, "RULE_NOT_FOUND"},
			{"bad JSON", `{"identifier":`, 400, "INVALID_JSON"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				wantError(t, e.call(t, "POST", "/check", c.Key, tt.body), tt.status, tt.code)
			})
		}
		// None of them counted anything.
		got, _ := e.check(t, c, `{"identifier":"u","limit":10,"window":60}`)
		if got.Remaining != 9 {
			t.Errorf("after refused checks, remaining = %d, want 9", got.Remaining)
		}
	})
}

// TestCheckIgnoresRefillRateOnWindows: the product description's clients
// send one body, refill_rate included, whatever the algorithm. The window
// algorithms and gcra (whose rate is limit/window) accept it and ignore it:
// the same counter as without it.
func TestCheckIgnoresRefillRateOnWindows(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "refill")
		for _, alg := range []string{"fixed_window", "sliding_window", "gcra"} {
			with := `{"identifier":"u-` + alg + `","limit":3,"window":3600,"algorithm":"` + alg + `","refill_rate":0.5}`
			without := `{"identifier":"u-` + alg + `","limit":3,"window":3600,"algorithm":"` + alg + `"}`
			for i, body := range []string{with, without, with} {
				got, _ := e.check(t, c, body)
				if !got.Allowed || got.Remaining != int64(2-i) || got.Algorithm != alg {
					t.Errorf("%s check %d = %+v, want allowed with %d remaining on one counter", alg, i+1, got, 2-i)
				}
			}
			// Even a refill rate that would be invalid for a token bucket.
			got, _ := e.check(t, c, `{"identifier":"u-`+alg+`","limit":3,"window":3600,"algorithm":"`+alg+`","refill_rate":-1}`)
			if got.Allowed || got.Remaining != 0 {
				t.Errorf("%s check 4 = %+v, want rejected (over the limit)", alg, got)
			}
		}
		if r := e.call(t, "POST", "/rules", c.Key, `{"name":"windowed","algorithm":"fixed_window","limit":5,"window":60,"refill_rate":2}`); r.status != http.StatusCreated || strings.Contains(string(r.body), "refill_rate") {
			t.Errorf("POST /rules with refill_rate on fixed_window = %d %s, want 201 without refill_rate", r.status, r.body)
		}
		if r := e.call(t, "POST", "/rules", c.Key, `{"name":"cells","algorithm":"gcra","limit":5,"window":60,"refill_rate":2}`); r.status != http.StatusCreated || strings.Contains(string(r.body), "refill_rate") {
			t.Errorf("POST /rules with refill_rate on gcra = %d %s, want 201 without refill_rate", r.status, r.body)
		}
	})
}

func TestCheckCountersDoNotCollide(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "collide")
		for _, rule := range []string{
			`{"name":"per_minute","algorithm":"fixed_window","limit":2,"window":60}`,
			`{"name":"per_hour","algorithm":"fixed_window","limit":2,"window":3600}`,
		} {
			if r := e.call(t, "POST", "/rules", c.Key, rule); r.status != http.StatusCreated {
				t.Fatalf("POST /rules %s = %d %s", rule, r.status, r.body)
			}
		}
		// Two rules with the same numbers on one identifier: separate counters.
		for _, rule := range []string{"per_minute", "per_hour"} {
			for i := range 2 {
				got, _ := e.check(t, c, `{"identifier":"alice","rule":"`+rule+`"}`)
				if !got.Allowed || got.Remaining != int64(1-i) || got.Rule != rule {
					t.Errorf("rule %s check %d = %+v, want allowed, remaining %d", rule, i+1, got, 1-i)
				}
			}
		}
		// The rule overrides inline fields.
		got, _ := e.check(t, c, `{"identifier":"alice","rule":"per_minute","limit":1000,"window":1,"algorithm":"token_bucket"}`)
		if got.Allowed || got.Limit != 2 || got.Algorithm != "fixed_window" {
			t.Errorf("rule with inline fields = %+v, want the rule's limit 2 fixed_window, rejected", got)
		}
		// Inline windows of 60 and 3600 seconds do not share a counter.
		for _, w := range []string{"60", "3600"} {
			for i := range 2 {
				got, _ := e.check(t, c, `{"identifier":"bob","limit":2,"window":`+w+`,"algorithm":"fixed_window"}`)
				if !got.Allowed || got.Remaining != int64(1-i) {
					t.Errorf("window %s check %d = %+v, want allowed, remaining %d", w, i+1, got, 1-i)
				}
			}
		}
		// Nor do the same numbers under different algorithms.
		got, _ = e.check(t, c, `{"identifier":"bob","limit":2,"window":60,"algorithm":"sliding_window"}`)
		if !got.Allowed || got.Remaining != 1 {
			t.Errorf("sliding window after fixed window = %+v, want a fresh counter", got)
		}
	})
}

func TestCheckExempt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "exempt")
		if r := e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"internal-service","reason":"ours"}`); r.status != http.StatusCreated {
			t.Fatalf("POST /exemptions = %d %s", r.status, r.body)
		}
		for range 3 {
			got, r := e.check(t, c, `{"identifier":"internal-service","limit":1,"window":60,"algorithm":"fixed_window"}`)
			want := checkReply{Allowed: true, Exempted: true, Identifier: "internal-service", Limit: 1, Remaining: 1, Algorithm: "fixed_window", ResetAt: got.ResetAt, Reason: "exempt"}
			if got != want {
				t.Errorf("exempt check = %+v, want %+v", got, want)
			}
			if _, ok := r.header["Retry-After"]; ok {
				t.Errorf("exempt check has Retry-After")
			}
		}
		if v := counterValue(t, e.reg, "throttle_decisions_total", map[string]string{"api": "rest", "algorithm": "fixed_window", "outcome": "exempt"}); v != 3 {
			t.Errorf("exempt decisions = %v, want 3", v)
		}
		// Nothing was counted: after the exemption goes, the full limit is there.
		if r := e.call(t, "DELETE", "/exemptions/internal-service", c.Key, ""); r.status != http.StatusOK {
			t.Fatalf("DELETE /exemptions/internal-service = %d %s", r.status, r.body)
		}
		got, _ := e.check(t, c, `{"identifier":"internal-service","limit":1,"window":60,"algorithm":"fixed_window"}`)
		if !got.Allowed || got.Exempted || got.Remaining != 0 {
			t.Errorf("check after removing the exemption = %+v, want allowed, not exempted, remaining 0", got)
		}
		got, _ = e.check(t, c, `{"identifier":"internal-service","limit":1,"window":60,"algorithm":"fixed_window"}`)
		if got.Allowed {
			t.Errorf("second check after removing the exemption = %+v, want rejected", got)
		}
	})
}

func TestReset(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "reset")
		for _, id := range []string{"bob", "bob:1"} {
			e.check(t, c, `{"identifier":"`+id+`","limit":1,"window":60,"algorithm":"fixed_window"}`)
			e.check(t, c, `{"identifier":"`+id+`","limit":5,"algorithm":"token_bucket"}`)
		}
		r := e.call(t, "POST", "/reset", c.Key, `{"identifier":"bob","algorithm":"fixed_window"}`)
		if r.status != http.StatusOK || strings.TrimSpace(r.body) != `{"message":"Identifier reset successfully","identifier":"bob","keys_deleted":1}` {
			t.Errorf("POST /reset fixed_window = %d %s", r.status, r.body)
		}
		got, _ := e.check(t, c, `{"identifier":"bob","limit":1,"window":60,"algorithm":"fixed_window"}`)
		if !got.Allowed {
			t.Errorf("bob after reset = %+v, want allowed", got)
		}
		got, _ = e.check(t, c, `{"identifier":"bob:1","limit":1,"window":60,"algorithm":"fixed_window"}`)
		if got.Allowed {
			t.Errorf("bob:1 after resetting bob = %+v, want still rejected", got)
		}
		// Without an algorithm every limit of bob goes: the fixed window used
		// again above and the token bucket.
		r = e.call(t, "POST", "/reset", c.Key, `{"identifier":"bob"}`)
		if got := decodeReply[resetReply](t, r); r.status != http.StatusOK || got.KeysDeleted != 2 {
			t.Errorf("POST /reset = %d %s, want 200 with keys_deleted 2", r.status, r.body)
		}
		r = e.call(t, "POST", "/reset", c.Key, `{"identifier":"nobody"}`)
		if got := decodeReply[resetReply](t, r); r.status != http.StatusOK || got.KeysDeleted != 0 {
			t.Errorf("POST /reset of an unknown identifier = %d %s, want keys_deleted 0", r.status, r.body)
		}
		wantError(t, e.call(t, "POST", "/reset", c.Key, `{}`), 400, "MISSING_FIELD")
		wantError(t, e.call(t, "POST", "/reset", c.Key, `{"identifier":"bob","algorithm":"nope"}`), 400, "INVALID_FIELD")
	})
}

func TestConcurrentChecks(t *testing.T) {
	for _, b := range backends() {
		for _, alg := range []string{"fixed_window", "token_bucket"} {
			t.Run(b.name+"/"+alg, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, b)
				c := e.register(t, "concurrent")
				body := `{"identifier":"hot","limit":100,"window":60,"algorithm":"` + alg + `"}`
				var allowed, rejected atomic.Int64
				var wg sync.WaitGroup
				for range 40 {
					wg.Go(func() {
						for range 10 {
							r := e.call(t, "POST", "/check", c.Key, body)
							if r.status != http.StatusOK {
								t.Errorf("POST /check = %d %s", r.status, r.body)
								return
							}
							if decodeReply[checkReply](t, r).Allowed {
								allowed.Add(1)
							} else {
								rejected.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if allowed.Load() != 100 || rejected.Load() != 300 {
					t.Errorf("allowed %d, rejected %d; want exactly 100 and 300", allowed.Load(), rejected.Load())
				}
				stats := decodeReply[usageReply](t, e.call(t, "GET", "/stats/"+c.ID, c.Key, ""))
				if stats.TotalChecks != 400 || stats.Allowed != 100 || stats.Rejected != 300 {
					t.Errorf("stats = %+v, want 400 checks, 100 allowed, 300 rejected", stats)
				}
			})
		}
	}
}

func TestCheckIP(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "ip")
		// The peer is 127.0.0.1 and not trusted: X-Forwarded-For is ignored.
		r := e.call(t, "POST", "/check/ip", c.Key, `{"limit":2,"window":60,"algorithm":"fixed_window"}`, "X-Forwarded-For", "203.0.113.1", "X-Real-IP", "203.0.113.2")
		if r.status != http.StatusOK {
			t.Fatalf("POST /check/ip = %d %s", r.status, r.body)
		}
		got := decodeReply[checkReply](t, r)
		if got.Identifier != "127.0.0.1" || !got.Allowed || got.Remaining != 1 {
			t.Errorf("POST /check/ip = %+v, want identifier 127.0.0.1, allowed, remaining 1", got)
		}
		// /check/ip is /check with the IP as identifier.
		got, _ = e.check(t, c, `{"identifier":"127.0.0.1","limit":2,"window":60,"algorithm":"fixed_window"}`)
		if got.Remaining != 0 {
			t.Errorf("/check of the same IP = %+v, want the same counter (remaining 0)", got)
		}
		wantError(t, e.call(t, "POST", "/check/ip", c.Key, `{"identifier":"x","limit":2,"window":60}`), 400, "INVALID_FIELD")
		wantError(t, e.call(t, "POST", "/check/ip", c.Key, `{"window":60}`), 400, "MISSING_FIELD")
	})
}

// TestCheckIPProxies serves the handler directly with chosen peer addresses.
func TestCheckIPProxies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0], func(d *Deps) {
		d.TrustedProxies = mustPrefixes(t, "10.0.0.0/8", "fd00::/8")
	})
	c := e.register(t, "proxies")
	for _, tt := range []struct {
		name, peer string
		hdr        []string
		want       string
	}{
		{"untrusted peer, spoofed headers", "192.0.2.7:4000", []string{"X-Forwarded-For", "203.0.113.9", "X-Real-IP", "203.0.113.10"}, "192.0.2.7"},
		{"trusted proxy", "10.0.0.1:4000", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9"},
		{"right-most untrusted hop", "10.0.0.1:4000", []string{"X-Forwarded-For", "1.1.1.1, 203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"client spoofs the left", "10.0.0.1:4000", []string{"X-Forwarded-For", "10.9.9.9, 198.51.100.4"}, "198.51.100.4"},
		{"every hop trusted", "10.0.0.1:4000", []string{"X-Forwarded-For", "10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"garbage hop", "10.0.0.1:4000", []string{"X-Forwarded-For", "nonsense, 10.0.0.2"}, "10.0.0.2"},
		{"X-Real-IP", "10.0.0.1:4000", []string{"X-Real-IP", "203.0.113.11"}, "203.0.113.11"},
		{"trusted, no headers", "10.0.0.1:4000", nil, "10.0.0.1"},
		{"IPv6 peer", "[2001:db8::1]:4000", []string{"X-Forwarded-For", "203.0.113.9"}, "2001:db8::1"},
		{"IPv6 proxy", "[fd00::1]:4000", []string{"X-Forwarded-For", "2001:db8::2"}, "2001:db8::2"},
		{"IPv4-mapped peer", "[::ffff:10.0.0.1]:4000", []string{"X-Forwarded-For", "203.0.113.12"}, "203.0.113.12"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, "POST", "/check/ip", `{"limit":5,"window":60}`)
			req.RemoteAddr = tt.peer
			req.Header.Set("X-API-Key", c.Key)
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				req.Header.Set(tt.hdr[i], tt.hdr[i+1])
			}
			w := serve(e.handler, req)
			if w.Code != http.StatusOK {
				t.Fatalf("POST /check/ip = %d %s", w.Code, w.Body)
			}
			if got := decodeReply[checkReply](t, reply{body: w.Body.String()}).Identifier; got != tt.want {
				t.Errorf("identifier = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLimiterUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "down")
	down := NewHandler(Deps{DB: e.db, Cache: e.cache, Usage: e.usage, Limiter: deadRedis(t)})
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/check", `{"identifier":"u","limit":1,"window":60}`},
		{"POST", "/check/ip", `{"limit":1,"window":60}`},
		{"POST", "/reset", `{"identifier":"u"}`},
		{"POST", "/register", `{"name":"n","email":"n@example.com"}`},
	} {
		req := newRequest(t, tt.method, tt.path, tt.body)
		req.Header.Set("X-API-Key", c.Key)
		w := serve(down, req)
		wantError(t, reply{status: w.Code, header: w.Header(), body: w.Body.String()}, http.StatusServiceUnavailable, "BACKEND_UNAVAILABLE")
		if !strings.Contains(w.Body.String(), `"request_id":"`) {
			t.Errorf("%s %s: 503 without request_id: %s", tt.method, tt.path, w.Body)
		}
	}
}

// TestCheckOverloaded: when the backend answered a moment ago but not this
// check within its budget, Throttle was the bottleneck: 503 OVERLOADED with
// Retry-After, never a silent "allowed".
func TestCheckOverloaded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "busy")
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, srv.URL())
	g, err := redisstore.NewGuard(redisstore.New(rdb, redisstore.Options{}), redisstore.GuardOptions{
		Mode: algorithms.FailOpen, DefaultTimeout: 100 * time.Millisecond, HungAfter: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(Deps{DB: e.db, Cache: e.cache, Usage: e.usage, Limiter: g})
	check := func() reply {
		req := newRequest(t, "POST", "/check", `{"identifier":"u","limit":5,"window":60}`)
		req.Header.Set("X-API-Key", c.Key)
		w := serve(h, req)
		return reply{status: w.Code, header: w.Header(), body: w.Body.String()}
	}
	if r := check(); r.status != http.StatusOK {
		t.Fatalf("with Redis answering: %d %s", r.status, r.body)
	}
	// Redis stops answering for a moment: it answered a moment ago, so this
	// is not an outage (HungAfter), and the check is refused, not guessed.
	// From a client of its own: CLIENT PAUSE never pauses the connection
	// that sent it, which the store's pool could reuse.
	admin := redistest.NewClient(t, srv.URL())
	if err := admin.Do(t.Context(), "CLIENT", "PAUSE", 1000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	r := check()
	wantError(t, r, http.StatusServiceUnavailable, "OVERLOADED")
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	if strings.Contains(r.body, `"allowed"`) {
		t.Errorf("an overloaded check answered a decision: %s", r.body)
	}
}

// deadRedis is a Redis store over an address nothing listens on.
func deadRedis(t *testing.T) *redisstore.Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	return redisstore.New(rdb, redisstore.Options{})
}

func mustPrefixes(t *testing.T, cidrs ...string) []netip.Prefix {
	t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			t.Fatalf("parse %q: %v", c, err)
		}
		ps = append(ps, p)
	}
	return ps
}

func TestClientIP(t *testing.T) {
	trusted := mustPrefixes(t, "10.0.0.0/8")
	for _, tt := range []struct {
		remote string
		xff    []string
		want   string
	}{
		{"192.0.2.1:1", []string{"203.0.113.1"}, "192.0.2.1"},
		{"10.1.1.1:1", []string{"203.0.113.1, 10.0.0.9", "10.0.0.8"}, "203.0.113.1"},
		{"10.1.1.1:1", []string{" 203.0.113.1:8080 "}, "203.0.113.1"},
		{"10.1.1.1:1", []string{"[2001:db8::5]:443"}, "2001:db8::5"},
		{"not-an-address", nil, "not-an-address"},
		{"host:99", nil, "host"},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		for _, v := range tt.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientIP(r, trusted); got != tt.want {
			t.Errorf("clientIP(%s, XFF %q) = %q, want %q", tt.remote, tt.xff, got, tt.want)
		}
	}
}

func ExampleNewServer() {
	srv := NewServer(":8080", http.NotFoundHandler())
	fmt.Println(srv.ReadHeaderTimeout, srv.MaxHeaderBytes)
	// Output: 5s 65536
}

// TestOversizedParts: the input-size rule on the REST doors. A check's
// rule (or identifier) over 1024 bytes is 400 INVALID_FIELD naming it,
// never looked up nor written back (it was 404 RULE_NOT_FOUND echoing the
// whole name), in /check and in a batch (with the check's index); the Envoy
// counters refuse a domain over 1024 bytes (before it is looked up or
// named in a refusal) and a value over 1024 bytes or a YEAR override
// (INVALID_DESCRIPTORS), as gRPC does.
func TestOversizedParts(t *testing.T) {
	var rls *ratelimitsvc.Server
	e := newEnv(t, backends()[0], withCounters(t, adminKey, &rls))
	c := e.register(t, "sizes")
	rule := strings.Repeat("r", 2048)
	wantMessage := func(r reply, status int, code, msg string) {
		t.Helper()
		wantError(t, r, status, code)
		if got := decodeReply[errorReply](t, r).Error; got != msg {
			t.Errorf("error = %q, want %q", got, msg)
		}
	}
	wantMessage(e.call(t, "POST", "/check", c.Key, `{"identifier":"u","rule":"`+rule+`"}`), 400, "INVALID_FIELD",
		"rule is 2048 bytes, longer than the 1024 allowed")
	wantMessage(e.call(t, "POST", "/check/batch", c.Key, `{"checks":[{"identifier":"u","limit":1,"window":60},{"identifier":"u","rule":"`+rule+`"}]}`),
		400, "INVALID_FIELD", "checks[1]: rule is 2048 bytes, longer than the 1024 allowed")
	wantMessage(e.call(t, "POST", "/check", c.Key, `{"identifier":"`+strings.Repeat("é", 600)+`","limit":1,"window":60}`), 400, "INVALID_FIELD",
		"identifier is 1200 bytes, longer than the 1024 allowed")

	domain := strings.Repeat("d", 1025)
	wantMessage(e.call(t, "POST", "/descriptors/"+domain+"/counters", adminKey, `{"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`),
		400, "INVALID_FIELD", "domain is 1025 bytes, longer than the 1024 allowed")
	wantMessage(e.call(t, "POST", "/descriptors/edge/counters", adminKey, `{"descriptors":[{"entries":[{"key":"k","value":"`+strings.Repeat("v", 1025)+`"}]}]}`),
		400, "INVALID_DESCRIPTORS", "descriptor 0 entry 0 value is 1025 bytes, longer than the 1024 allowed")
	wantMessage(e.call(t, "POST", "/descriptors/edge/counters/reset", adminKey, `{"descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":1,"unit":"year"}}]}`),
		400, "INVALID_DESCRIPTORS", "descriptor 0 limit override: a window of 365 days, longer than the 30 days allowed (MAX_OVERRIDE_WINDOW)")
}
