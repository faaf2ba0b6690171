package restapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReservations: a check with reserve_ttl holds its hits (a peek shows
// them used; a reservation that would pass the limit is refused), a commit
// of less gives the rest back and of more counts the excess, a cancel gives
// all back; a second settle is 409 RESERVATION_SETTLED, an unknown,
// malformed or another client's id 404 RESERVATION_NOT_FOUND; reserve_ttl
// past MAX_RESERVATION_TTL, hits past RESERVATION_MAX_FRACTION of the limit
// or without hits are 400; past RESERVATION_MAX_OUTSTANDING_PER_CLIENT,
// 429. Every algorithm, an approximate limit too, both stores; in a batch.
func TestReservations(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(d *Deps) { d.Reservations.MaxOutstanding = 3 })
		c := e.register(t, "reserver")
		other := e.register(t, "other")
		limits := map[string]string{
			"fixed_window": `"limit":10,"window":3600,"algorithm":"fixed_window"`, "sliding_window": `"limit":10,"window":3600,"algorithm":"sliding_window"`,
			"token_bucket": `"limit":10,"window":3600,"algorithm":"token_bucket"`, "gcra": `"limit":10,"window":3600,"algorithm":"gcra"`,
		}
		for alg, limit := range limits {
			body := func(hits int64, ttl string) string {
				return `{"identifier":"u-` + alg + `",` + limit + `,"hits":` + itoa(hits) + `,"reserve_ttl":` + ttl + `}`
			}
			got, _ := e.check(t, c, body(5, "30"))
			if !got.Allowed || got.Remaining != 5 || got.ReservationID == "" {
				t.Fatalf("%s: reserve 5 of 10 = %+v", alg, got)
			}
			if exp, err := time.Parse(time.RFC3339, got.ReservationExpiresAt); err != nil || !exp.Equal(testNow.Add(30*time.Second)) {
				t.Errorf("%s: reservation_expires_at %q, want %s", alg, got.ReservationExpiresAt, testNow.Add(30*time.Second).Format(time.RFC3339))
			}
			if n := e.peek(t, c, `{"identifier":"u-`+alg+`",`+limit+`}`); n != 5 {
				t.Errorf("%s: peek with 5 held: %d left, want 5", alg, n)
			}
			if refused, _ := e.check(t, c, body(5, "30")); !refused.Allowed || refused.Remaining != 0 {
				t.Errorf("%s: a second reservation of 5 = %+v, want allowed, 0 left", alg, refused)
			} else if r := e.call(t, "DELETE", "/reservations/"+refused.ReservationID, c.Key, ""); r.status != http.StatusOK {
				t.Fatalf("%s: cancel: %d %s", alg, r.status, r.body)
			} else if s := decodeReply[settleReply](t, r); s.Held != 5 || s.Committed != 0 || s.Remaining != 5 {
				t.Errorf("%s: cancel = %+v, want held 5, committed 0, 5 left", alg, s)
			}
			plain := func(hits int64) { e.check(t, c, `{"identifier":"u-`+alg+`",`+limit+`,"hits":`+itoa(hits)+`}`) }
			plain(4)
			if refused, _ := e.check(t, c, body(2, "30")); refused.Allowed || refused.ReservationID != "" {
				t.Errorf("%s: reserve 2 with 5 held and 4 used of 10 = %+v, want refused, no reservation", alg, refused)
			}
			plain(-4)
			wantError(t, e.call(t, "POST", "/reservations/"+got.ReservationID+"/commit", other.Key, `{"hits":1}`), http.StatusNotFound, "RESERVATION_NOT_FOUND")
			r := e.call(t, "POST", "/reservations/"+got.ReservationID+"/commit", c.Key, `{"hits":7}`)
			if s := decodeReply[settleReply](t, r); r.status != http.StatusOK || s.Held != 5 || s.Committed != 7 || s.Remaining != 3 {
				t.Errorf("%s: commit 7 of 5 = %d %+v, want held 5, committed 7, 3 left", alg, r.status, s)
			}
			wantError(t, e.call(t, "POST", "/reservations/"+got.ReservationID+"/commit", c.Key, `{"hits":1}`), http.StatusConflict, "RESERVATION_SETTLED")
			wantError(t, e.call(t, "DELETE", "/reservations/"+got.ReservationID, c.Key, ""), http.StatusConflict, "RESERVATION_SETTLED")
			got, _ = e.check(t, c, body(3, "1.5"))
			r = e.call(t, "POST", "/reservations/"+got.ReservationID+"/commit", c.Key, `{"hits":1}`)
			if s := decodeReply[settleReply](t, r); s.Remaining != 2 {
				t.Errorf("%s: commit 1 of 3 with 7 used = %+v, want 2 left", alg, s)
			}
		}
		wantError(t, e.call(t, "POST", "/reservations/nonsense/commit", c.Key, `{"hits":1}`), http.StatusNotFound, "RESERVATION_NOT_FOUND")
		wantError(t, e.call(t, "DELETE", "/reservations/"+strings.Repeat("A", 40), c.Key, ""), http.StatusNotFound, "RESERVATION_NOT_FOUND")
		inline := `"identifier":"x","limit":10,"window":60`
		for _, tt := range []struct{ body, why string }{
			{`{` + inline + `,"hits":2,"reserve_ttl":61}`, "ttl past MAX_RESERVATION_TTL"},
			{`{` + inline + `,"hits":2,"reserve_ttl":0}`, "ttl 0"},
			{`{` + inline + `,"hits":6,"reserve_ttl":10}`, "more than half the limit"},
			{`{` + inline + `,"hits":0,"reserve_ttl":10}`, "no hits"},
			{`{` + inline + `,"hits":-1,"reserve_ttl":10}`, "a refund"},
		} {
			wantError(t, e.call(t, "POST", "/check", c.Key, tt.body), http.StatusBadRequest, "INVALID_FIELD")
		}
		got, _ := e.check(t, c, `{"identifier":"ok","limit":10,"window":60,"hits":1,"reserve_ttl":10}`)
		wantError(t, e.call(t, "POST", "/reservations/"+got.ReservationID+"/commit", c.Key, `{"hits":-1}`), http.StatusBadRequest, "INVALID_FIELD")
		wantError(t, e.call(t, "POST", "/reservations/"+got.ReservationID+"/commit", c.Key, `{}`), http.StatusBadRequest, "MISSING_FIELD")
		// An approximate limit's reservation, in a batch with another.
		e.call(t, "POST", "/rules", c.Key, `{"name":"approx","limit":10,"window":3600,"accuracy":"approximate"}`)
		br, _ := e.batch(t, c, `{"identifier":"a","rule":"approx","hits":4,"reserve_ttl":20}`, `{"identifier":"b","limit":10,"window":60,"hits":2,"reserve_ttl":20}`)
		if !br.Allowed || br.Results[0].ReservationID == "" || br.Results[1].ReservationID == "" || br.Results[0].Remaining != 6 {
			t.Fatalf("batch of two reservations = %+v", br)
		}
		// The client now has 3 outstanding (ok, and the batch's two): the cap.
		wantError(t, e.call(t, "POST", "/check", c.Key, `{"identifier":"y","limit":10,"window":60,"hits":1,"reserve_ttl":10}`), http.StatusTooManyRequests, "TOO_MANY_RESERVATIONS")
		if r := e.call(t, "DELETE", "/reservations/"+br.Results[0].ReservationID, c.Key, ""); r.status != http.StatusOK {
			t.Errorf("cancel the approximate reservation: %d %s", r.status, r.body)
		}
		if n := e.peek(t, c, `{"identifier":"a","rule":"approx"}`); n != 10 {
			t.Errorf("approximate limit after the cancel: %d left, want 10", n)
		}
		if got, _ := e.check(t, c, `{"identifier":"y","limit":10,"window":60,"hits":1,"reserve_ttl":10}`); got.ReservationID == "" {
			t.Errorf("a reservation after one was cancelled = %+v, want one", got)
		}
		if v := counterValue(t, e.reg, "throttle_reservations_total", map[string]string{"outcome": "committed"}); v != 8 {
			t.Errorf("throttle_reservations_total{committed} = %v, want 8", v)
		}
	})
}
