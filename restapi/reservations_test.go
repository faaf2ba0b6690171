package restapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
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

// TestReservationsReset: POST /reset of an identifier takes its
// reservations with its counters: the quota is whole at once, a commit or
// a cancel after is 410 RESERVATION_RESET and counts nothing into the
// fresh counter (nor brings a bucket back), the reservation no longer
// counts against the cap, and a reservation made after the reset commits
// as usual. A reset of another identifier leaves them alone. Every
// algorithm, both stores.
func TestReservationsReset(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(d *Deps) { d.Reservations.MaxOutstanding = 4 })
		c := e.register(t, "resetter")
		for _, alg := range []string{"fixed_window", "sliding_window", "token_bucket", "gcra"} {
			limit := `"limit":10,"window":3600,"algorithm":"` + alg + `"`
			ident := "r-" + alg
			reserve := func(hits int64) checkReply {
				t.Helper()
				got, _ := e.check(t, c, `{"identifier":"`+ident+`",`+limit+`,"hits":`+itoa(hits)+`,"reserve_ttl":30}`)
				if !got.Allowed || got.ReservationID == "" {
					t.Fatalf("%s: reserve %d = %+v", alg, hits, got)
				}
				return got
			}
			a, other := reserve(4), reserve(2)
			e.call(t, "POST", "/reset", c.Key, `{"identifier":"someone-else"}`)
			if n := e.peek(t, c, `{"identifier":"`+ident+`",`+limit+`}`); n != 4 {
				t.Errorf("%s: after a reset of another identifier: %d left, want 4", alg, n)
			}
			if r := e.call(t, "POST", "/reset", c.Key, `{"identifier":"`+ident+`"}`); r.status != http.StatusOK {
				t.Fatalf("%s: reset: %d %s", alg, r.status, r.body)
			}
			if n := e.peek(t, c, `{"identifier":"`+ident+`",`+limit+`}`); n != 10 {
				t.Errorf("%s: after the reset: %d left, want 10", alg, n)
			}
			wantError(t, e.call(t, "POST", "/reservations/"+a.ReservationID+"/commit", c.Key, `{"hits":4}`), http.StatusGone, "RESERVATION_RESET")
			wantError(t, e.call(t, "DELETE", "/reservations/"+other.ReservationID, c.Key, ""), http.StatusGone, "RESERVATION_RESET")
			if n := e.peek(t, c, `{"identifier":"`+ident+`",`+limit+`}`); n != 10 {
				t.Errorf("%s: after the commit of a reset reservation: %d left, want 10 (nothing counted)", alg, n)
			}
			// The cap is 4: the two reset ones hold no place.
			fresh := []checkReply{reserve(1), reserve(1), reserve(1), reserve(1)}
			r := e.call(t, "POST", "/reservations/"+fresh[0].ReservationID+"/commit", c.Key, `{"hits":3}`)
			if s := decodeReply[settleReply](t, r); r.status != http.StatusOK || s.Held != 1 || s.Committed != 3 || s.Remaining != 4 {
				t.Errorf("%s: commit 3 of a reservation made after the reset = %d %+v, want 4 left (3 + 3 held)", alg, r.status, s)
			}
			e.call(t, "POST", "/reset", c.Key, `{"identifier":"`+ident+`"}`) // frees the other three's places
		}
		if v := counterValue(t, e.reg, "throttle_reservations_total", map[string]string{"outcome": "reset"}); v != 8 {
			t.Errorf(`throttle_reservations_total{outcome="reset"} = %v, want 8`, v)
		}
	})
}

// TestReservationCapAcrossReplicas: two REST replicas on one Redis (and
// one database) cap a client's outstanding reservations together: with
// RESERVATION_MAX_OUTSTANDING_PER_CLIENT 3, the fourth is 429
// TOO_MANY_RESERVATIONS on either replica and counts nothing; a commit on
// one replica frees a place on the other.
func TestReservationCapAcrossReplicas(t *testing.T) {
	b := backend{"postgres+redis", "postgres", "redis"}
	dbURL := pgtest.FreshDatabase(t, "restapi")
	cap3 := func(d *Deps) { d.Reservations.MaxOutstanding = 3 }
	one := newEnvAt(t, dbURL, b, cap3)
	c := one.register(t, "two-replicas")
	two := newEnvAt(t, dbURL, b, cap3) // loads the client at its start
	body := func(ident string) string {
		return `{"identifier":"` + ident + `","limit":10,"window":3600,"hits":1,"reserve_ttl":30}`
	}
	var ids []string
	for i, e := range []*testEnv{one, two, one} {
		got, _ := e.check(t, c, body("cap"))
		if got.ReservationID == "" {
			t.Fatalf("reservation %d: %+v, want one", i+1, got)
		}
		ids = append(ids, got.ReservationID)
	}
	for name, e := range map[string]*testEnv{"one": one, "two": two} {
		wantError(t, e.call(t, "POST", "/check", c.Key, body("cap-"+name)), http.StatusTooManyRequests, "TOO_MANY_RESERVATIONS")
		if n := e.peek(t, c, `{"identifier":"cap-`+name+`","limit":10,"window":3600}`); n != 10 {
			t.Errorf("replica %s: the refused reservation left %d of 10, want 10 (nothing counted)", name, n)
		}
	}
	if r := two.call(t, "POST", "/reservations/"+ids[0]+"/commit", c.Key, `{"hits":1}`); r.status != http.StatusOK {
		t.Fatalf("commit on replica two of a reservation made on one: %d %s", r.status, r.body)
	}
	if got, _ := one.check(t, c, body("cap")); got.ReservationID == "" {
		t.Errorf("a reservation on replica one after a commit on two: %+v, want one", got)
	}
	wantError(t, two.call(t, "POST", "/check", c.Key, body("cap")), http.StatusTooManyRequests, "TOO_MANY_RESERVATIONS")
}

// TestStatsReservations: /stats lists the caller's outstanding
// reservations by counter with the quota used and, of it, held — up with
// each reservation, down with a commit; a counter with none left is not
// listed. Both stores.
func TestStatsReservations(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "stats-held")
		limit := `"limit":10,"window":3600,"algorithm":"fixed_window"`
		stats := func() usageReply {
			t.Helper()
			r := e.call(t, "GET", "/stats/"+c.ID, c.Key, "")
			if r.status != http.StatusOK {
				t.Fatalf("stats: %d %s", r.status, r.body)
			}
			return decodeReply[usageReply](t, r)
		}
		if s := stats(); s.Reservations == nil || s.Reservations.Outstanding != 0 || len(s.Reservations.Counters) != 0 {
			t.Errorf("stats before any reservation: %+v, want 0 outstanding, no counters", s.Reservations)
		}
		a, _ := e.check(t, c, `{"identifier":"s",`+limit+`,"hits":4,"reserve_ttl":30}`)
		e.check(t, c, `{"identifier":"s",`+limit+`,"hits":2,"reserve_ttl":30}`)
		e.check(t, c, `{"identifier":"s",`+limit+`,"hits":1}`)
		want := heldCounterUsage{Identifier: "s", Algorithm: "fixed_window", Limit: 10, Window: 3600, Used: 7, Held: 6, Remaining: 3,
			ResetAt: testNow.Truncate(time.Hour).Add(time.Hour).Unix(), Reservations: 2}
		if s := stats(); s.Reservations == nil || s.Reservations.Outstanding != 2 || len(s.Reservations.Counters) != 1 || s.Reservations.Counters[0] != want {
			t.Errorf("stats with 6 held: %+v, want 2 outstanding, %+v", s.Reservations, want)
		}
		e.call(t, "POST", "/reservations/"+a.ReservationID+"/commit", c.Key, `{"hits":1}`)
		want.Used, want.Held, want.Remaining, want.Reservations = 4, 2, 6, 1
		if s := stats(); s.Reservations == nil || s.Reservations.Outstanding != 1 || len(s.Reservations.Counters) != 1 || s.Reservations.Counters[0] != want {
			t.Errorf("stats after a commit of 1 of 4: %+v, want %+v", s.Reservations, want)
		}
	})
}
