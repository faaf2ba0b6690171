package throttleclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Registration is a client POST /register made: its id and its API key,
// which Throttle shows only this once.
type Registration struct {
	ClientID string `json:"client_id"`
	APIKey   string `json:"api_key"`
	Domain   string `json:"domain"`
}

// Register registers a client named name, with email, on the server at
// baseURL (as JSON: the only body /register takes). The client has no Envoy
// domain (the operator grants them); more than the server's registrations
// per hour from one address is a 429 *Error. Every failure is an error; a
// Registration returned has its APIKey.
func Register(ctx context.Context, baseURL, name, email string) (Registration, error) {
	body, err := json.Marshal(map[string]string{"name": name, "email": email})
	if err != nil {
		return Registration{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+"/register", bytes.NewReader(body))
	if err != nil {
		return Registration{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Registration{}, fmt.Errorf("throttle: register: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Registration{}, fmt.Errorf("throttle: register: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return Registration{}, replyError(resp.StatusCode, data)
	}
	var r Registration
	if err := json.Unmarshal(data, &r); err != nil || r.APIKey == "" {
		return Registration{}, fmt.Errorf("throttle: register: a 201 reply without an api_key: %q", data)
	}
	return r, nil
}
