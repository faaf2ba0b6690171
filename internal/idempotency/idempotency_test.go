package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

func TestRedis(t *testing.T) {
	rdb := redistest.NewClient(t, redistest.SharedURL(t))
	s := NewRedis(rdb, "test-"+t.Name()+":")
	ctx := context.Background()
	key := "client:" + time.Now().Format(time.RFC3339Nano)
	if ok, held, err := s.Claim(ctx, key, []byte("pending"), time.Minute); err != nil || !ok || held != nil {
		t.Fatalf("first claim = %v %q %v, want claimed", ok, held, err)
	}
	if ok, held, err := s.Claim(ctx, key, []byte("other"), time.Minute); err != nil || ok || string(held) != "pending" {
		t.Fatalf("second claim = %v %q %v, want the pending value", ok, held, err)
	}
	if err := s.Put(ctx, key, []byte("done"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, held, _ := s.Claim(ctx, key, []byte("x"), time.Minute); ok || string(held) != "done" {
		t.Fatalf("claim after put = %v %q, want done", ok, held)
	}
	if ttl := rdb.PTTL(ctx, "test-"+t.Name()+":throttle:idem:{"+key+"}").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL = %v, want within a minute", ttl)
	}
	if err := s.Release(ctx, key); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := s.Claim(ctx, key, []byte("again"), time.Minute); !ok {
		t.Errorf("claim after release: not claimed")
	}
	// An unreachable Redis is an error, not a claim.
	dead := NewRedis(redistest.NewClient(t, "redis://127.0.0.1:1/0"), "")
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if ok, _, err := dead.Claim(dctx, key, nil, time.Minute); ok || err == nil {
		t.Errorf("claim on a dead Redis = %v, %v; want an error", ok, err)
	}
}
