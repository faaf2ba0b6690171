package restapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestIdempotentCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "idem")
		other := e.register(t, "idem2")
		body := `{"identifier":"u","limit":5,"window":60,"algorithm":"fixed_window"}`
		first := e.call(t, "POST", "/check", c.Key, body, "Idempotency-Key", "order-1")
		again := e.call(t, "POST", "/check", c.Key, body, "Idempotency-Key", "order-1")
		if first.status != 200 || again.status != 200 || again.body != first.body || !strings.Contains(first.body, `"remaining":4`) {
			t.Fatalf("first %d %s, retry %d %s; want the same 200, remaining 4", first.status, first.body, again.status, again.body)
		}
		if first.header.Get("Idempotent-Replayed") != "" || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("Idempotent-Replayed: first %q, retry %q; want none, true", first.header.Get("Idempotent-Replayed"), again.header.Get("Idempotent-Replayed"))
		}
		for _, h := range []string{"X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"} {
			if again.header.Get(h) != first.header.Get(h) {
				t.Errorf("retry %s = %q, first %q", h, again.header.Get(h), first.header.Get(h))
			}
		}
		if n := e.peek(t, c, body); n != 4 {
			t.Errorf("remaining after a retry = %d, want 4 (counted once)", n)
		}
		// The same key with another body, and on another route.
		wantError(t, e.call(t, "POST", "/check", c.Key, strings.Replace(body, `"u"`, `"v"`, 1), "Idempotency-Key", "order-1"),
			http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED")
		wantError(t, e.call(t, "POST", "/check/batch", c.Key, `{"checks":[`+body+`]}`, "Idempotency-Key", "order-1"),
			http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED")
		// Keys are per client.
		if r := e.call(t, "POST", "/check", other.Key, body, "Idempotency-Key", "order-1"); r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("another client's order-1 = %d, replayed %q; want its own decision", r.status, r.header.Get("Idempotent-Replayed"))
		}
		// A refusal is kept too.
		bad := e.call(t, "POST", "/check", c.Key, `{"identifier":"u","rule":"nope"}`, "Idempotency-Key", "order-2")
		badAgain := e.call(t, "POST", "/check", c.Key, `{"identifier":"u","rule":"nope"}`, "Idempotency-Key", "order-2")
		if bad.status != 404 || badAgain.status != 404 || badAgain.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("a 404 and its retry: %d, %d replayed %q", bad.status, badAgain.status, badAgain.header.Get("Idempotent-Replayed"))
		}
		// A batch.
		batch := `{"checks":[` + body + `,{"identifier":"w","limit":5,"window":60}]}`
		b1 := e.call(t, "POST", "/check/batch", c.Key, batch, "Idempotency-Key", "batch-1")
		b2 := e.call(t, "POST", "/check/batch", c.Key, batch, "Idempotency-Key", "batch-1")
		if b1.status != 200 || b2.body != b1.body || b2.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("batch and retry: %d %s / %s", b1.status, b1.body, b2.body)
		}
		if n := e.peek(t, c, body); n != 3 {
			t.Errorf("remaining after a batch and its retry = %d, want 3", n)
		}
	})
}

func TestIdempotentConcurrent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		c := e.register(t, "idemrace")
		body := `{"identifier":"race","limit":100,"window":60,"algorithm":"fixed_window"}`
		const n = 16
		replies := make([]reply, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { replies[i] = e.call(t, "POST", "/check", c.Key, body, "Idempotency-Key", "once") })
		}
		wg.Wait()
		replayed := 0
		for _, r := range replies {
			if r.status != 200 || r.body != replies[0].body {
				t.Errorf("reply %d %s, want 200 %s", r.status, r.body, replies[0].body)
			}
			if r.header.Get("Idempotent-Replayed") == "true" {
				replayed++
			}
		}
		if replayed != n-1 {
			t.Errorf("%d replies replayed, want %d", replayed, n-1)
		}
		if left := e.peek(t, c, body); left != 99 {
			t.Errorf("remaining %d after %d concurrent requests with one key, want 99 (counted once)", left, n)
		}
	})
}

func TestIdempotencyKeyRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	c := e.register(t, "idembad")
	body := `{"identifier":"u","limit":5,"window":60}`
	for _, k := range []string{"", strings.Repeat("k", 256), "has space", "tab\there", "é"} {
		wantError(t, e.call(t, "POST", "/check", c.Key, body, "Idempotency-Key", k), http.StatusBadRequest, "INVALID_IDEMPOTENCY_KEY")
	}
	if r := e.call(t, "POST", "/check", c.Key, body, "Idempotency-Key", strings.Repeat("k", 255)); r.status != 200 {
		t.Errorf("a key of 255 characters: %d %s", r.status, r.body)
	}
}

// TestMemoryIdempotencyQuota: a client keeps at most its quota's records
// and bytes, its oldest evicted first; released and expired records leave
// its count; another client keeps its own.
func TestMemoryIdempotencyQuota(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := newMemoryIdempotency(func() time.Time { return now }, IdempotencyQuota{Records: 3, Bytes: 100})
	ctx := context.Background()
	held := func(client, key string) bool {
		_, ok := s.m[idemKey{client, key}]
		return ok
	}
	for i := range 5 {
		s.Put(ctx, "a", fmt.Sprint("k", i), []byte("0123456789"), time.Minute)
	}
	s.Put(ctx, "b", "k0", []byte("x"), time.Minute)
	for i, want := range []bool{false, false, true, true, true} {
		if got := held("a", fmt.Sprint("k", i)); got != want {
			t.Errorf("a's k%d kept = %v, want %v (the three newest)", i, got, want)
		}
	}
	if !held("b", "k0") {
		t.Errorf("b's record evicted by a's")
	}
	s.Release(ctx, "a", "k4")
	if q := s.clients["a"]; q.records != 2 || q.bytes != 20 {
		t.Errorf("a after a release: %d records, %d bytes; want 2, 20", q.records, q.bytes)
	}
	s.Put(ctx, "a", "big1", bytes.Repeat([]byte("x"), 60), time.Minute)
	s.Put(ctx, "a", "big2", bytes.Repeat([]byte("x"), 60), time.Minute)
	if q := s.clients["a"]; q.records != 1 || q.bytes != 60 || !held("a", "big2") {
		t.Errorf("a after two 60-byte replies: %d records, %d bytes; want big2 alone", q.records, q.bytes)
	}
	// A claim is no kept reply: it counts in no quota.
	s.Claim(ctx, "c", "p", []byte("pending"), time.Minute)
	if s.clients["c"] != nil {
		t.Errorf("a pending claim counted in c's quota")
	}
}

// TestIdempotentBatchStoredCompactly: a 100-check batch's reply, with long
// identifiers, is kept in a fraction of its size (127 KB before).
func TestIdempotentBatchStoredCompactly(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		if b.limiter != "memory" {
			t.Skip("the memory store's records are read here")
		}
		e := newEnv(t, b)
		c := e.register(t, "compact")
		var checks []string
		for i := range 100 {
			checks = append(checks, fmt.Sprintf(`{"identifier":"%s-%03d","limit":5,"window":60}`, strings.Repeat("i", 200), i))
		}
		batch := `{"checks":[` + strings.Join(checks, ",") + `]}`
		first := e.call(t, "POST", "/check/batch", c.Key, batch, "Idempotency-Key", "big")
		again := e.call(t, "POST", "/check/batch", c.Key, batch, "Idempotency-Key", "big")
		if first.status != 200 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("batch and retry: %d, replayed %q", first.status, again.header.Get("Idempotent-Replayed"))
		}
		q := e.idempotency.clients[c.ID]
		if q == nil || q.records != 1 || q.bytes > int64(len(first.body))/4 {
			t.Errorf("kept: %+v for a %d-byte reply; want one record of at most a quarter of it", q, len(first.body))
		}
		t.Logf("a %d-byte batch reply kept in %d bytes", len(first.body), q.bytes)
	})
}

// TestMemoryIdempotencyTotal: past TotalBytes of all clients' kept
// replies, a reply is not kept (errIdempotencyFull), and no client's kept
// replies are evicted for another's; once some are gone, replies are kept
// again.
func TestMemoryIdempotencyTotal(t *testing.T) {
	ctx := context.Background()
	s := newMemoryIdempotency(time.Now, IdempotencyQuota{Records: 1000, Bytes: 1 << 20, TotalBytes: 300})
	reply := make([]byte, 200)
	if err := s.Put(ctx, "a", "k1", reply, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "b", "k1", reply, time.Hour); !errors.Is(err, errIdempotencyFull) {
		t.Fatalf("second client's reply past the total: %v, want errIdempotencyFull", err)
	}
	if kept, held, _ := s.Claim(ctx, "a", "k1", []byte("p"), time.Hour); kept || len(held) != 200 {
		t.Errorf("a's reply: claimed %v, held %d bytes; want kept", kept, len(held))
	}
	if kept, _, _ := s.Claim(ctx, "b", "k1", []byte("p"), time.Hour); !kept {
		t.Error("b's reply was kept past the total")
	}
	if s.total != 200 {
		t.Errorf("total = %d bytes, want 200", s.total)
	}
	if err := s.Release(ctx, "a", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "b", "k1", reply, time.Hour); err != nil {
		t.Errorf("after a's was released: %v", err)
	}
}
