package throttleclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	throttleclient "github.com/throttle-rl/throttle/examples/client"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The client and middleware against a real Throttle (built from ./cmd/throttle).
func TestAgainstThrottle(t *testing.T) {
	srv := throttletest.Start(t)
	key := srv.Register(t, "client-test")
	c := throttleclient.New(srv.URL, key)

	t.Run("Check", func(t *testing.T) {
		l := throttleclient.Limit{Limit: 2, Window: 3600, Algorithm: "fixed_window"}
		var got []string
		for i := 0; i < 3; i++ {
			d, err := c.Check(context.Background(), "check-user", l)
			if err != nil {
				t.Fatalf("Check %d: %v", i+1, err)
			}
			got = append(got, strconv.FormatBool(d.Allowed)+"/"+strconv.FormatInt(d.Remaining, 10))
			if d.Limit != 2 {
				t.Errorf("Check %d: Limit = %d, want 2", i+1, d.Limit)
			}
			if !d.Allowed && (d.RetryAfter < 1 || d.RetryAfter > 3600) {
				t.Errorf("Check %d: RetryAfter = %d, want 1..3600", i+1, d.RetryAfter)
			}
		}
		if want := "[true/1 true/0 false/0]"; fmtList(got) != want {
			t.Errorf("allowed/remaining = %v, want %s", fmtList(got), want)
		}
	})

	// Windows of an hour and a slow bucket: no window ends during the test.
	tests := []struct {
		name          string
		limit         throttleclient.Limit
		maxRetryAfter int
	}{
		{"fixed_window", throttleclient.Limit{Limit: 3, Window: 3600, Algorithm: "fixed_window"}, 3600},
		// A full current window still weighs on the next one: up to two windows.
		{"sliding_window", throttleclient.Limit{Limit: 3, Window: 3600, Algorithm: "sliding_window"}, 7200},
		{"token_bucket", throttleclient.Limit{Limit: 3, Algorithm: "token_bucket", RefillRate: 0.01}, 100},
	}
	for _, tt := range tests {
		t.Run("Middleware/"+tt.name, func(t *testing.T) {
			h := throttleclient.Middleware(c, byUser, tt.limit)(hello())
			user := "mw-" + tt.name

			var codes, remaining []string
			for i := 0; i < 5; i++ {
				rec := serve(h, user)
				codes = append(codes, strconv.Itoa(rec.Code))
				remaining = append(remaining, rec.Header().Get("X-RateLimit-Remaining"))
				if got := rec.Header().Get("X-RateLimit-Limit"); got != "3" {
					t.Errorf("request %d: X-RateLimit-Limit = %q, want 3", i+1, got)
				}
				if rec.Header().Get("X-RateLimit-Reset") == "" {
					t.Errorf("request %d: no X-RateLimit-Reset", i+1)
				}
				switch rec.Code {
				case http.StatusOK:
					if rec.Body.String() != "hello" || rec.Header().Get("Retry-After") != "" {
						t.Errorf("request %d: 200 with body %q, Retry-After %q", i+1, rec.Body.String(), rec.Header().Get("Retry-After"))
					}
				case http.StatusTooManyRequests:
					ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
					if err != nil || ra < 1 || ra > tt.maxRetryAfter {
						t.Errorf("request %d: Retry-After = %q, want 1..%d", i+1, rec.Header().Get("Retry-After"), tt.maxRetryAfter)
					}
				}
			}
			if got, want := fmtList(codes), "[200 200 200 429 429]"; got != want {
				t.Errorf("statuses = %s, want %s", got, want)
			}
			if got, want := fmtList(remaining), "[2 1 0 0 0]"; got != want {
				t.Errorf("X-RateLimit-Remaining = %s, want %s", got, want)
			}
			// Another user has a limit of their own.
			if rec := serve(h, user+"-other"); rec.Code != http.StatusOK {
				t.Errorf("another user: status %d, want 200", rec.Code)
			}
		})
	}

	t.Run("Middleware/unidentified requests pass unchecked", func(t *testing.T) {
		h := throttleclient.Middleware(c, byUser, throttleclient.Limit{Limit: 1, Window: 3600, Algorithm: "fixed_window"})(hello())
		for i := 0; i < 3; i++ {
			if rec := serve(h, ""); rec.Code != http.StatusOK || rec.Header().Get("X-RateLimit-Limit") != "" {
				t.Fatalf("request %d without identity: %d, headers %v", i+1, rec.Code, rec.Header())
			}
		}
	})

	t.Run("bad API key", func(t *testing.T) {
		bad := throttleclient.New(srv.URL, "thr_not-a-key")
		_, err := bad.Check(context.Background(), "x", throttleclient.Limit{Limit: 1, Window: 60})
		var e *throttleclient.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusUnauthorized {
			t.Fatalf("Check with a bad key: %v, want a 401 *Error", err)
		}
		// The middleware fails open on it too, and reports it.
		var reported error
		bad.OnError = func(_ *http.Request, err error) { reported = err }
		h := throttleclient.Middleware(bad, byUser, throttleclient.Limit{Limit: 1, Window: 60})(hello())
		if rec := serve(h, "x"); rec.Code != http.StatusOK || reported == nil {
			t.Errorf("bad key: status %d, reported %v; want 200 and an OnError call", rec.Code, reported)
		}
	})
}

// Register makes a client whose key works (without a domain: the operator
// grants them), again with the same name and email (a contact, not an
// account), and fails clearly, with the server's reason, on a bad email.
func TestRegister(t *testing.T) {
	srv := throttletest.Start(t)
	ctx := context.Background()
	r, err := throttleclient.Register(ctx, srv.URL, "register-test", "register-test@example.com")
	if err != nil || r.ClientID == "" || r.Domain != "" {
		t.Fatalf("Register: %+v, %v", r, err)
	}
	d, err := throttleclient.New(srv.URL, r.APIKey).Check(ctx, "u", throttleclient.Limit{Limit: 1, Window: 60, Algorithm: "fixed_window"})
	if err != nil || !d.Allowed {
		t.Fatalf("Check with the new key: %+v, %v", d, err)
	}
	if again, err := throttleclient.Register(ctx, srv.URL, "register-test", "register-test@example.com"); err != nil || again.ClientID == r.ClientID {
		t.Errorf("Register again: %+v, %v; want another client", again, err)
	}
	_, err = throttleclient.Register(ctx, srv.URL, "register-test", "not-an-email")
	var e *throttleclient.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || e.Code != "INVALID_FIELD" {
		t.Errorf("Register with a bad email: %v, want a 400 INVALID_FIELD *Error", err)
	}
}

// With Throttle unreachable the middleware fails open by default, closed when asked.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now

	limit := throttleclient.Limit{Limit: 1, Window: 60}
	tests := []struct {
		failClosed bool
		want       int
	}{
		{false, http.StatusOK},
		{true, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		c := throttleclient.New("http://"+addr, "thr_whatever")
		c.FailClosed = tt.failClosed
		var reported int
		c.OnError = func(*http.Request, error) { reported++ }
		h := throttleclient.Middleware(c, byUser, limit)(hello())
		for i := 0; i < 2; i++ {
			if rec := serve(h, "u"); rec.Code != tt.want {
				t.Errorf("FailClosed=%v: status %d, want %d", tt.failClosed, rec.Code, tt.want)
			}
		}
		if reported != 2 {
			t.Errorf("FailClosed=%v: OnError called %d times, want 2", tt.failClosed, reported)
		}
	}
}

func byUser(r *http.Request) string { return r.Header.Get("X-User-Id") }

func hello() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
}

func serve(h http.Handler, user string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if user != "" {
		req.Header.Set("X-User-Id", user)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func fmtList(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}
