package restapi

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
)

// limitHeaderNames are every rate-limit header a reply may carry.
var limitHeaderNames = []string{
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Algorithm", "X-RateLimit-Warning",
	"RateLimit-Policy", "RateLimit", "Retry-After",
}

// wantLimitHeaders fails unless h has exactly the rate-limit headers of want
// (a name not in want must be absent), each once.
func wantLimitHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	for _, name := range limitHeaderNames {
		got, ok := h[http.CanonicalHeaderKey(name)]
		w, wantOK := want[name]
		switch {
		case !wantOK && ok:
			t.Errorf("%s: %s = %q, want none", what, name, got)
		case wantOK && (len(got) != 1 || got[0] != w):
			t.Errorf("%s: %s = %q, want %q", what, name, got, w)
		}
	}
	for name := range want {
		if !slices.Contains(limitHeaderNames, name) {
			t.Fatalf("%s: %s is not a rate-limit header name", what, name)
		}
	}
}

// unixIn is testNow + d in Unix seconds.
func unixIn(d time.Duration) string { return strconv.FormatInt(testNow.Add(d).Unix(), 10) }

// TestCheckRateLimitHeaders checks the exact headers of /check with the
// default sets (both), for each algorithm and for a rule, allowed and
// rejected. testNow is 30 s into a minute and an hour.
func TestCheckRateLimitHeaders(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		steps []map[string]string
	}{
		{"fixed_window", `{"identifier":"fw","limit":2,"window":60,"algorithm":"fixed_window"}`, []map[string]string{
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "fixed_window",
				"RateLimit-Policy": `"fixed_window-2-60";q=2;w=60`, "RateLimit": `"fixed_window-2-60";r=1;t=30`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "fixed_window", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"fixed_window-2-60";q=2;w=60`, "RateLimit": `"fixed_window-2-60";r=0;t=30`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "fixed_window", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"fixed_window-2-60";q=2;w=60`, "RateLimit": `"fixed_window-2-60";r=0;t=30`, "Retry-After": "30"},
		}},
		// Rejected at 30 s with 2 in the current window: the weighted count
		// falls to 1 only when the next window is half over, in 60 s. t
		// follows Retry-After, not the window's end in 30 s.
		{"sliding_window", `{"identifier":"sw","limit":2,"window":60,"algorithm":"sliding_window"}`, []map[string]string{
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "sliding_window",
				"RateLimit-Policy": `"sliding_window-2-60";q=2;w=60`, "RateLimit": `"sliding_window-2-60";r=1;t=30`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "sliding_window", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"sliding_window-2-60";q=2;w=60`, "RateLimit": `"sliding_window-2-60";r=0;t=30`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "sliding_window", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"sliding_window-2-60";q=2;w=60`, "RateLimit": `"sliding_window-2-60";r=0;t=60`, "Retry-After": "60"},
		}},
		// 2 tokens, 0.5 per second: w is the 4 s a full refill takes; t is
		// until the bucket is full, or (rejected) until the next token.
		{"token_bucket", `{"identifier":"tb","limit":2,"algorithm":"token_bucket","refill_rate":0.5}`, []map[string]string{
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": unixIn(2 * time.Second), "X-RateLimit-Algorithm": "token_bucket",
				"RateLimit-Policy": `"token_bucket-2-4";q=2;w=4`, "RateLimit": `"token_bucket-2-4";r=1;t=2`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(4 * time.Second), "X-RateLimit-Algorithm": "token_bucket", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"token_bucket-2-4";q=2;w=4`, "RateLimit": `"token_bucket-2-4";r=0;t=4`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(4 * time.Second), "X-RateLimit-Algorithm": "token_bucket", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"token_bucket-2-4";q=2;w=4`, "RateLimit": `"token_bucket-2-4";r=0;t=2`, "Retry-After": "2"},
		}},
		// Token bucket with the default rate (limit per minute without a
		// window): w is the minute.
		{"token_bucket default rate", `{"identifier":"tbd","limit":6,"algorithm":"token_bucket"}`, []map[string]string{
			{"X-RateLimit-Limit": "6", "X-RateLimit-Remaining": "5", "X-RateLimit-Reset": unixIn(10 * time.Second), "X-RateLimit-Algorithm": "token_bucket",
				"RateLimit-Policy": `"token_bucket-6-60";q=6;w=60`, "RateLimit": `"token_bucket-6-60";r=5;t=10`},
		}},
		// 2 per minute: each hit moves the TAT 30 s ahead.
		{"gcra", `{"identifier":"cell","limit":2,"window":60,"algorithm":"gcra"}`, []map[string]string{
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": unixIn(30 * time.Second), "X-RateLimit-Algorithm": "gcra",
				"RateLimit-Policy": `"gcra-2-60";q=2;w=60`, "RateLimit": `"gcra-2-60";r=1;t=30`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(time.Minute), "X-RateLimit-Algorithm": "gcra", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"gcra-2-60";q=2;w=60`, "RateLimit": `"gcra-2-60";r=0;t=60`},
			{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(time.Minute), "X-RateLimit-Algorithm": "gcra", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"gcra-2-60";q=2;w=60`, "RateLimit": `"gcra-2-60";r=0;t=30`, "Retry-After": "30"},
		}},
		// A rule names the policy; its hour ends in 59 min 30 s.
		{"rule", `{"identifier":"ru","rule":"api.calls"}`, []map[string]string{
			{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(3570 * time.Second), "X-RateLimit-Algorithm": "fixed_window", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"api.calls";q=1;w=3600`, "RateLimit": `"api.calls";r=0;t=3570`},
			{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(3570 * time.Second), "X-RateLimit-Algorithm": "fixed_window", "X-RateLimit-Warning": "true",
				"RateLimit-Policy": `"api.calls";q=1;w=3600`, "RateLimit": `"api.calls";r=0;t=3570`, "Retry-After": "3570"},
		}},
		// An exempt identifier: nothing counted, no reset.
		{"exempt", `{"identifier":"internal","limit":5,"window":60,"algorithm":"fixed_window"}`, []map[string]string{
			{"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "5", "X-RateLimit-Algorithm": "fixed_window",
				"RateLimit-Policy": `"fixed_window-5-60";q=5;w=60`, "RateLimit": `"fixed_window-5-60";r=5`},
		}},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "headers")
		if r := e.call(t, "POST", "/rules", c.Key, `{"name":"api.calls","algorithm":"fixed_window","limit":1,"window":3600}`); r.status != http.StatusCreated {
			t.Fatalf("POST /rules = %d %s", r.status, r.body)
		}
		if r := e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"internal"}`); r.status != http.StatusCreated {
			t.Fatalf("POST /exemptions = %d %s", r.status, r.body)
		}
		for _, tc := range cases {
			for i, want := range tc.steps {
				_, r := e.check(t, c, tc.body)
				wantLimitHeaders(t, tc.name+" check "+strconv.Itoa(i+1), r.header, want)
			}
		}
	})
}

// TestCheckHeaderSets: RATE_LIMIT_HEADERS=x sends only X-RateLimit-*,
// ietf only the draft's fields; Retry-After is on every rejection either way.
func TestCheckHeaderSets(t *testing.T) {
	for _, tt := range []struct {
		sets              ratelimitheader.Sets
		allowed, rejected map[string]string
	}{
		{sets: ratelimitheader.X,
			allowed: map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(30 * time.Second),
				"X-RateLimit-Algorithm": "fixed_window", "X-RateLimit-Warning": "true"},
			rejected: map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(30 * time.Second),
				"X-RateLimit-Algorithm": "fixed_window", "X-RateLimit-Warning": "true", "Retry-After": "30"},
		},
		{sets: ratelimitheader.IETF,
			allowed:  map[string]string{"RateLimit-Policy": `"fixed_window-1-60";q=1;w=60`, "RateLimit": `"fixed_window-1-60";r=0;t=30`},
			rejected: map[string]string{"RateLimit-Policy": `"fixed_window-1-60";q=1;w=60`, "RateLimit": `"fixed_window-1-60";r=0;t=30`, "Retry-After": "30"},
		},
	} {
		t.Run(tt.sets.String(), func(t *testing.T) {
			e := newEnv(t, backend{"sqlite+memory", "sqlite", "memory"}, func(d *Deps) { d.HeaderSets = tt.sets })
			c := e.register(t, "sets")
			body := `{"identifier":"s","limit":1,"window":60,"algorithm":"fixed_window"}`
			_, r := e.check(t, c, body)
			wantLimitHeaders(t, "allowed", r.header, tt.allowed)
			_, r = e.check(t, c, body)
			wantLimitHeaders(t, "rejected", r.header, tt.rejected)
			// /check/ip is the same handler with the caller's address.
			r = e.call(t, "POST", "/check/ip", c.Key, `{"limit":1,"window":60,"algorithm":"fixed_window"}`)
			wantLimitHeaders(t, "/check/ip allowed", r.header, tt.allowed)
		})
	}
}

// TestRegisterRateLimitHeaders: POST /register's per-IP limit sends its
// headers on the 201 and, with Retry-After, on the 429.
func TestRegisterRateLimitHeaders(t *testing.T) {
	for _, tt := range []struct {
		sets          ratelimitheader.Sets
		created, over map[string]string
	}{
		{sets: ratelimitheader.Both,
			created: map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": unixIn(3570 * time.Second),
				"RateLimit-Policy": `"register";q=2;w=3600`, "RateLimit": `"register";r=1;t=3570`},
			over: map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(3570 * time.Second),
				"RateLimit-Policy": `"register";q=2;w=3600`, "RateLimit": `"register";r=0;t=3570`, "Retry-After": "3570"},
		},
		{sets: ratelimitheader.X,
			created: map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": unixIn(3570 * time.Second)},
			over:    map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": unixIn(3570 * time.Second), "Retry-After": "3570"},
		},
		{sets: ratelimitheader.IETF,
			created: map[string]string{"RateLimit-Policy": `"register";q=2;w=3600`, "RateLimit": `"register";r=1;t=3570`},
			over:    map[string]string{"RateLimit-Policy": `"register";q=2;w=3600`, "RateLimit": `"register";r=0;t=3570`, "Retry-After": "3570"},
		},
	} {
		t.Run(tt.sets.String(), func(t *testing.T) {
			e := newEnv(t, backend{"sqlite+memory", "sqlite", "memory"}, func(d *Deps) {
				d.HeaderSets = tt.sets
				d.RegisterLimit = algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Hour}
			})
			r := e.call(t, "POST", "/register", "", `{"name":"r","email":"r1@example.com"}`)
			if r.status != http.StatusCreated {
				t.Fatalf("first registration = %d %s", r.status, r.body)
			}
			wantLimitHeaders(t, "201", r.header, tt.created)
			if r = e.call(t, "POST", "/register", "", `{"name":"r","email":"r2@example.com"}`); r.status != http.StatusCreated {
				t.Fatalf("second registration = %d %s", r.status, r.body)
			}
			r = e.call(t, "POST", "/register", "", `{"name":"r","email":"r3@example.com"}`)
			wantError(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
			wantLimitHeaders(t, "429", r.header, tt.over)
		})
	}
}
