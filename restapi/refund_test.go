package restapi

import (
	"testing"
)

// TestCheckRefund: "hits": -N on /check and in a batch gives back what was
// used, never below zero used, in every algorithm.
func TestCheckRefund(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "refund")
		for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket", "gcra"} {
			limit := `"limit":10,"window":60,"algorithm":"` + alg + `"`
			body := func(id string, hits int) string {
				return `{"identifier":"` + id + `",` + limit + `,"hits":` + itoa(int64(hits)) + `}`
			}
			e.check(t, c, body("u-"+alg, 6))
			got, _ := e.check(t, c, body("u-"+alg, -4))
			if !got.Allowed || got.Remaining != 8 || got.Reason != "within_limit" {
				t.Errorf("%s: refund of 4 = %+v, want allowed, 8 left", alg, got)
			}
			if got, _ := e.check(t, c, body("u-"+alg, -100)); got.Remaining != 10 {
				t.Errorf("%s: refund of 100 with 2 used: %d left, want 10", alg, got.Remaining)
			}
			if got, _ := e.check(t, c, body("u-"+alg, 10)); !got.Allowed {
				t.Errorf("%s: 10 hits after the refunds refused: %+v", alg, got)
			}
			// In a refused batch the refund is not made.
			got2, _ := e.batch(t, c, body("u-"+alg, -5), body("full-"+alg, 11))
			if got2.Allowed || got2.Results[1].Allowed {
				t.Errorf("%s: batch = %+v, want refused", alg, got2)
			}
			if n := e.peek(t, c, `{"identifier":"u-`+alg+`",`+limit+`}`); n != 0 {
				t.Errorf("%s: %d left after a refused batch with a refund, want 0", alg, n)
			}
			got2, _ = e.batch(t, c, body("u-"+alg, -5), body("other-"+alg, 1))
			if !got2.Allowed || got2.Results[0].Remaining != 5 {
				t.Errorf("%s: batch with a refund of 5 = %+v, want allowed, 5 left", alg, got2)
			}
		}
	})
}
