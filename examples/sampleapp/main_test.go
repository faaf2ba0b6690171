package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	h := newHandler()
	tests := []struct {
		path, user string
		want       string
	}{
		{"/", "", "hello\n"},
		{"/anything", "alice", "hello, alice\n"},
		{"/healthz", "", "ok\n"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodGet, tt.path, nil)
		if tt.user != "" {
			req.Header.Set("X-User-Id", tt.user)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.String() != tt.want {
			t.Errorf("GET %s (user %q) = %d %q, want 200 %q", tt.path, tt.user, rec.Code, rec.Body.String(), tt.want)
		}
	}
}

// run serves on PORT and stops cleanly when its context ends.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, func(k string) string {
			if k == "PORT" {
				return strconv.Itoa(port)
			}
			return ""
		}, io.Discard)
	}()
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	var body string
	for i := 0; i < 100; i++ {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(body, "hello") {
		t.Errorf("GET / = %q, want hello", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
