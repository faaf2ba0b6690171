package restapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/inputsize"
	"github.com/throttle-rl/throttle/store"
)

// fuzzCheckDeps are checkDeps over a fresh SQLite store, for FuzzParseCheck.
func fuzzCheckDeps(f *testing.F) checkDeps {
	f.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(f.TempDir(), "throttle.db"), log)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	cache := store.NewCache(db, time.Hour, log)
	if err := cache.Refresh(ctx); err != nil {
		f.Fatal(err)
	}
	return checkDeps{Cache: cache, Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}), Now: time.Now}
}

// FuzzParseCheck: a POST /check body (batch false) or /check/batch body
// (batch true), decoded and checked as the handlers do: nothing panics, a
// refusal is a client error (4xx, UTF-8 message of at most 2 KiB), and a
// check that passes is within the input-size rule, its hits and limit
// within the engine's bounds.
func FuzzParseCheck(f *testing.F) {
	d := fuzzCheckDeps(f)
	c := store.Client{ID: "fuzz", DefaultAlgorithm: algorithms.SlidingWindow}
	for _, body := range []string{
		`{"identifier":"user_123","limit":3,"window":60,"algorithm":"fixed_window"}`,
		`{"identifier":"u","limit":10,"algorithm":"token_bucket","refill_rate":0.5,"hits":-2,"warn_threshold":0.3}`,
		`{"identifier":"u","rule":"api"}`,
		`{"identifier":"","limit":10,"window":60}`,
		`{"checks":[{"identifier":"a","limit":1,"window":60},{"identifier":"b","rule":"nope"}]}`,
		`{"checks":[]}`,
	} {
		f.Add([]byte(body), bytes.HasPrefix([]byte(body), []byte(`{"checks"`)))
	}
	f.Fuzz(func(t *testing.T, body []byte, batch bool) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/check", bytes.NewReader(body))
		var checks []check
		var err error
		if batch {
			checks, err = parseBatch(w, r, d, c)
		} else {
			var req checkRequest
			if req, err = decode[checkRequest](w, r); err == nil {
				var ch check
				ch, err = newCheck(r, d, c, req, false)
				checks = []check{ch}
			}
		}
		if err != nil {
			wantClientError(t, err)
			return
		}
		if len(checks) == 0 || len(checks) > maxBatchChecks {
			t.Fatalf("%d checks passed", len(checks))
		}
		for i, ch := range checks {
			switch {
			case ch.identifier == "" || len(ch.identifier) > inputsize.MaxString || utf8.RuneCountInString(ch.identifier) > maxIdentifierLen:
				t.Fatalf("check %d: identifier of %d bytes passed", i, len(ch.identifier))
			case len(ch.rule) > inputsize.MaxString:
				t.Fatalf("check %d: rule of %d bytes passed", i, len(ch.rule))
			case ch.hits < -algorithms.MaxLimit || ch.hits > algorithms.MaxLimit:
				t.Fatalf("check %d: hits %d passed", i, ch.hits)
			}
			if err := ch.limit.Validate(); err != nil {
				t.Fatalf("check %d: limit %+v passed: %v", i, ch.limit, err)
			}
		}
	})
}

// wantClientError fails unless err is what a client is told of its own
// mistake: a 4xx with a short UTF-8 message.
func wantClientError(t *testing.T, err error) {
	t.Helper()
	status, code, msg := errorResponse(err)
	var ae *apiError
	if status < 400 || status >= 500 || !errors.As(err, &ae) {
		t.Fatalf("refused as %d %s: %v", status, code, err)
	}
	if !utf8.ValidString(msg) || len(msg) > 2048 {
		t.Fatalf("%d %s: message of %d bytes, UTF-8 %v", status, code, len(msg), utf8.ValidString(msg))
	}
}
