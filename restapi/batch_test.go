package restapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// peek reads what remains of a check body's limit without counting.
func (e *testEnv) peek(t *testing.T, c client, body string) int64 {
	t.Helper()
	got, _ := e.check(t, c, strings.Replace(body, "{", `{"hits":0,`, 1))
	return got.Remaining
}

func (e *testEnv) batch(t *testing.T, c client, checks ...string) (batchReply, reply) {
	t.Helper()
	r := e.call(t, "POST", "/check/batch", c.Key, `{"checks":[`+strings.Join(checks, ",")+`]}`)
	if r.status != http.StatusOK {
		t.Fatalf("POST /check/batch: %d %s", r.status, r.body)
	}
	return decodeReply[batchReply](t, r), r
}

func TestCheckBatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "batch")
		a := `{"identifier":"a","limit":5,"window":60,"algorithm":"fixed_window"}`
		bb := `{"identifier":"b","limit":2,"window":60,"algorithm":"token_bucket"}`
		got, r := e.batch(t, c, a, bb)
		if !got.Allowed || len(got.Results) != 2 || got.Results[0].Remaining != 4 || got.Results[1].Remaining != 1 {
			t.Fatalf("batch = %+v, want both allowed, remaining 4 and 1", got)
		}
		// The headers are b's, which has the least remaining.
		if r.header.Get("X-RateLimit-Limit") != "2" || r.header.Get("X-RateLimit-Remaining") != "1" {
			t.Errorf("headers %v, want those of b (limit 2, remaining 1)", r.header)
		}
		e.batch(t, c, a, bb) // b: 0 left
		// b is refused: neither is counted.
		got, r = e.batch(t, c, a, bb)
		if got.Allowed || !got.Results[0].Allowed || got.Results[1].Allowed || got.Results[1].Reason != "rate_limited" {
			t.Fatalf("batch over b = %+v, want a allowed, b refused, not allowed overall", got)
		}
		if r.header.Get("Retry-After") == "" || r.header.Get("X-RateLimit-Limit") != "2" {
			t.Errorf("headers %v: want b's, with Retry-After", r.header)
		}
		if n := e.peek(t, c, a); n != 3 {
			t.Errorf("a remaining = %d after a refused batch, want 3 (not counted)", n)
		}
		// The same limit twice, then a refused check: nothing is counted.
		over := `{"identifier":"b","limit":2,"window":60,"algorithm":"token_bucket"}`
		got, _ = e.batch(t, c, a, a, over)
		if got.Allowed || !got.Results[0].Allowed || !got.Results[1].Allowed || got.Results[2].Allowed {
			t.Errorf("a, a, b = %+v, want a and a within, b refused", got)
		}
		if n := e.peek(t, c, a); n != 3 {
			t.Errorf("a remaining = %d after a refused batch with a twice, want 3", n)
		}
		// An exempt identifier never refuses the others; its reply says so.
		e.call(t, "POST", "/exemptions", c.Key, `{"identifier":"vip"}`)
		got, r = e.batch(t, c, `{"identifier":"vip","limit":1,"window":60}`, a)
		if !got.Allowed || got.Results[0].Reason != "exempt" || got.Results[1].Remaining != 2 || r.header.Get("X-RateLimit-Limit") != "5" {
			t.Errorf("vip, a = %+v (headers %v), want vip exempt, a remaining 2, a's headers", got, r.header)
		}
	})
}

func TestCheckBatchRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "batchbad")
	one := `{"identifier":"a","limit":5,"window":60}`
	many := strings.TrimSuffix(strings.Repeat(one+",", 101), ",")
	for _, tt := range []struct {
		name, body, code, msg string
	}{
		{"no checks field", `{}`, "MISSING_FIELD", "checks is required"},
		{"no checks", `{"checks":[]}`, "INVALID_FIELD", "checks has 0 checks"},
		{"101 checks", `{"checks":[` + many + `]}`, "INVALID_FIELD", "checks has 101 checks"},
		{"a bad check", `{"checks":[` + one + `,` + one + `,{"identifier":"a","limit":5}]}`, "MISSING_FIELD", "checks[2]: window"},
		{"an unknown rule", `{"checks":[{"identifier":"a","rule":"nope"}]}`, "RULE_NOT_FOUND", "checks[0]: rule"},
		{"an unknown field", `{"checks":[{"identifier":"a","limit":5,"windwo":60}]}`, "UNKNOWN_FIELD", "windwo"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(t, "POST", "/check/batch", c.Key, tt.body)
			status := http.StatusBadRequest
			if tt.code == "RULE_NOT_FOUND" {
				status = http.StatusNotFound
			}
			wantError(t, r, status, tt.code)
			if !strings.Contains(r.body, tt.msg) {
				t.Errorf("body %s does not say %q", r.body, tt.msg)
			}
		})
	}
	// 100 checks is the most, and fine.
	hundred := strings.TrimSuffix(strings.Repeat(one+",", 100), ",")
	if r := e.call(t, "POST", "/check/batch", c.Key, `{"checks":[`+hundred+`]}`); r.status != http.StatusOK || !strings.Contains(r.body, fmt.Sprintf(`"allowed":false`)) {
		t.Errorf("100 checks of a 5-limit = %d %s, want 200, not allowed", r.status, r.body[:min(len(r.body), 200)])
	}
}
