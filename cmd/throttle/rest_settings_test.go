package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRESTAppsSettings(t *testing.T) {
	c, err := parseServe(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.REST; r.CORSAllowedOrigins != nil || r.ListObjects || r.IdempotencyTTL != 24*time.Hour {
		t.Errorf("defaults = %+v; want no origins, arrays, 24h", r)
	}
	c, err = parseServe([]string{"--list-response-format", "object"}, env(map[string]string{
		"CORS_ALLOWED_ORIGIN": " https://app.example.com/ , http://localhost:5173,*", "IDEMPOTENCY_TTL": "90m",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://app.example.com", "http://localhost:5173", "*"}
	if r := c.REST; !slices.Equal(r.CORSAllowedOrigins, want) || !r.ListObjects || r.IdempotencyTTL != 90*time.Minute {
		t.Errorf("parsed = %+v; want origins %q, objects, 90m", r, want)
	}
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CORS_ALLOWED_ORIGIN": "app.example.com"}, `CORS_ALLOWED_ORIGIN: "app.example.com" is not an origin`},
		{map[string]string{"CORS_ALLOWED_ORIGIN": "https://app.example.com/path"}, `"https://app.example.com/path" is not an origin`},
		{map[string]string{"LIST_RESPONSE_FORMAT": "objects"}, `LIST_RESPONSE_FORMAT: "objects" is not array or object`},
		{map[string]string{"IDEMPOTENCY_TTL": "forever"}, `IDEMPOTENCY_TTL: "forever" is not a duration`},
		{map[string]string{"IDEMPOTENCY_TTL": "10ms"}, `IDEMPOTENCY_TTL: "10ms" is not a duration of at least 1s`},
	} {
		if _, err := parseServe(nil, env(tt.env), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.env, err, tt.want)
		}
	}
}
