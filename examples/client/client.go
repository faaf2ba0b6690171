// Package throttleclient is a small Go client for Throttle's REST API: Check
// asks whether one request of an identifier (a user, an API key, an IP) is
// within a limit, and Middleware does that before each request an http.Handler
// serves, answering 429 with Retry-After when the limit is reached.
//
//	c := throttleclient.New("http://localhost:8080", os.Getenv("THROTTLE_API_KEY"))
//	limit := throttleclient.Limit{Limit: 100, Window: 60, Algorithm: "sliding_window"}
//	byUser := func(r *http.Request) string { return r.Header.Get("X-User-Id") }
//	http.ListenAndServe(":8000", throttleclient.Middleware(c, byUser, limit)(app))
//
// Register makes a client and returns its API key (shown only once).
//
// It is an example to copy as much as a library: standard library only.
package throttleclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Limit is the limit to check against, as /check takes it. Either Rule names a
// rule made with POST /rules, or Limit (and Window, except for the token bucket)
// give it inline.
type Limit struct {
	// Limit is the number of requests allowed per window (the bucket's capacity
	// for token_bucket).
	Limit int64 `json:"limit,omitempty"`
	// Window is the window in seconds; not used by token_bucket.
	Window int64 `json:"window,omitempty"`
	// Algorithm is fixed_window, sliding_window, token_bucket or gcra; empty
	// means the client's default_algorithm.
	Algorithm string `json:"algorithm,omitempty"`
	// RefillRate is token_bucket's refill in tokens per second; 0 means the
	// server's default.
	RefillRate float64 `json:"refill_rate,omitempty"`
	// Rule names a rule; it overrides the fields above.
	Rule string `json:"rule,omitempty"`
}

// Decision is Throttle's answer to one check.
type Decision struct {
	Allowed    bool   `json:"allowed"`
	Exempted   bool   `json:"exempted"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	// ResetAt is when the limit is whole again, in Unix seconds.
	ResetAt int64 `json:"reset_at"`
	// RetryAfter is, when not Allowed, the seconds to wait before retrying.
	RetryAfter int64  `json:"retry_after"`
	Algorithm  string `json:"algorithm"`
	// Warning is set when the remaining allowance is running low.
	Warning bool `json:"warning"`
}

// Error is an error reply from Throttle (a bad API key, an invalid limit, …).
type Error struct {
	StatusCode int
	Code       string `json:"code"`
	Message    string `json:"error"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("throttle: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Client calls one Throttle server with one API key. Its fields may be changed
// before first use.
type Client struct {
	// BaseURL is the server, such as "http://localhost:8080".
	BaseURL string
	// APIKey is the key POST /register returned.
	APIKey string
	// HTTPClient makes the calls. New sets one with a 2-second timeout: a rate
	// limiter that hangs must not hang the app.
	HTTPClient *http.Client
	// FailClosed makes Middleware answer 503 when Throttle cannot answer.
	// By default (false) it lets the request through: a rate limiter that is
	// down should not take the app down with it.
	FailClosed bool
	// OnError, optional, is told about every check Middleware could not make,
	// for logging; the request then goes on as FailClosed says.
	OnError func(r *http.Request, err error)
}

// New returns a Client for the server at baseURL.
func New(baseURL, apiKey string) *Client {
	return &Client{
		BaseURL:    strings.TrimRight(baseURL, "/"),
		APIKey:     apiKey,
		HTTPClient: &http.Client{Timeout: 2 * time.Second},
	}
}

// Check counts one request of identifier against l and returns the decision.
// A rejection is a Decision with Allowed false, not an error; errors are
// transport failures and *Error replies.
func (c *Client) Check(ctx context.Context, identifier string, l Limit) (Decision, error) {
	body, err := json.Marshal(struct {
		Identifier string `json:"identifier"`
		Limit
	}{identifier, l})
	if err != nil {
		return Decision{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/check", bytes.NewReader(body))
	if err != nil {
		return Decision{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", c.APIKey)
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Decision{}, fmt.Errorf("throttle: check: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Decision{}, fmt.Errorf("throttle: check: %w", err)
	}
	// Throttle answers 200 for both outcomes; 429 is accepted too, for servers
	// that signal a rejection in the status.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return Decision{}, replyError(resp.StatusCode, data)
	}
	var d Decision
	if err := json.Unmarshal(data, &d); err != nil {
		return Decision{}, fmt.Errorf("throttle: check: decode reply: %w", err)
	}
	if d.Limit == 0 {
		d.Limit, _ = strconv.ParseInt(resp.Header.Get("X-RateLimit-Limit"), 10, 64)
	}
	if !d.Allowed && d.RetryAfter <= 0 {
		d.RetryAfter, _ = strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
		if d.RetryAfter <= 0 && d.ResetAt > 0 {
			d.RetryAfter = d.ResetAt - time.Now().Unix()
		}
		d.RetryAfter = max(d.RetryAfter, 1)
	}
	return d, nil
}

// replyError is the *Error of an error reply with status and body data.
func replyError(status int, data []byte) *Error {
	e := &Error{StatusCode: status}
	if json.Unmarshal(data, e) != nil || e.Message == "" {
		e.Message = strings.TrimSpace(string(data))
	}
	return e
}
