package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

func TestRedis(t *testing.T) {
	rdb := redistest.NewClient(t, redistest.SharedURL(t))
	s := NewRedis(rdb, "test-"+t.Name()+":", Quota{})
	ctx := context.Background()
	key := "client:" + time.Now().Format(time.RFC3339Nano)
	if ok, held, err := s.Claim(ctx, "c", key, []byte("pending"), time.Minute); err != nil || !ok || held != nil {
		t.Fatalf("first claim = %v %q %v, want claimed", ok, held, err)
	}
	if ok, held, err := s.Claim(ctx, "c", key, []byte("other"), time.Minute); err != nil || ok || string(held) != "pending" {
		t.Fatalf("second claim = %v %q %v, want the pending value", ok, held, err)
	}
	if err := s.Put(ctx, "c", key, []byte("done"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, held, _ := s.Claim(ctx, "c", key, []byte("x"), time.Minute); ok || string(held) != "done" {
		t.Fatalf("claim after put = %v %q, want done", ok, held)
	}
	if ttl := rdb.PTTL(ctx, "test-"+t.Name()+":throttle:idem:{c}:"+key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL = %v, want within a minute", ttl)
	}
	if err := s.Release(ctx, "c", key); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := s.Claim(ctx, "c", key, []byte("again"), time.Minute); !ok {
		t.Errorf("claim after release: not claimed")
	}
	// An unreachable Redis is an error, not a claim.
	dead := NewRedis(redistest.NewClient(t, "redis://127.0.0.1:1/0"), "", Quota{})
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if ok, _, err := dead.Claim(dctx, "c", key, nil, time.Minute); ok || err == nil {
		t.Errorf("claim on a dead Redis = %v, %v; want an error", ok, err)
	}
}

// TestRedisQuota: a client keeps at most its quota's records and bytes,
// its oldest evicted first, under its own keys with a TTL; another client
// keeps its own.
func TestRedisQuota(t *testing.T) {
	rdb := redistest.NewClient(t, redistest.SharedURL(t))
	prefix := "test-" + t.Name() + "-" + time.Now().Format("150405.000000000") + ":"
	s := NewRedis(rdb, prefix, Quota{Records: 3, Bytes: 100})
	ctx := context.Background()
	for i := range 5 {
		if err := s.Put(ctx, "a", fmt.Sprint("k", i), []byte("0123456789"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, "b", "k0", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true, true, true} {
		ok, held, err := s.Claim(ctx, "a", fmt.Sprint("k", i), []byte("p"), time.Minute)
		if err != nil || ok == want || (want && string(held) != "0123456789") {
			t.Errorf("a's k%d after five puts: claimed %v held %q %v; want kept %v (the three newest)", i, ok, held, err, want)
		}
	}
	if ok, _, _ := s.Claim(ctx, "b", "k0", nil, time.Minute); ok {
		t.Errorf("b's record was evicted by a's")
	}
	// Bytes: a 60-byte reply and another leave one (100 at most).
	for _, k := range []string{"big1", "big2"} {
		if err := s.Put(ctx, "a", k, bytes.Repeat([]byte("x"), 60), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.ZCard(ctx, prefix+"throttle:idem:{a}#index").Val(); n != 1 {
		t.Errorf("a's index after two 60-byte replies: %d records, want 1", n)
	}
	if ttl := rdb.PTTL(ctx, prefix+"throttle:idem:{a}#sizes").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("sizes TTL = %v, want within a minute", ttl)
	}
}

// TestRedisQuotaSameMillisecond: replies put within one millisecond (as a
// busy client's are) keep their order in the index, so the oldest is
// evicted, not the one named first; before, the index ordered records of
// the same expiry millisecond by name, and a quota of 3 evicted the reply
// just put (TestRedisQuota failed one run in four).
func TestRedisQuotaSameMillisecond(t *testing.T) {
	rdb := redistest.NewClient(t, redistest.SharedURL(t))
	prefix := "test-" + t.Name() + "-" + time.Now().Format("150405.000000000") + ":"
	s := NewRedis(rdb, prefix, Quota{Records: 3})
	ctx := context.Background()
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("k%02d", 99-i)) // each named before the one put before it
		if err := s.Put(ctx, "a", names[i], []byte("r"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	got := rdb.ZRange(ctx, prefix+"throttle:idem:{a}#index", 0, -1).Val()
	if want := names[len(names)-3:]; !slices.Equal(got, want) {
		t.Errorf("kept %q after 40 puts, want the three newest %q", got, want)
	}
}

// TestRedisBudget: past MemoryPercent of Redis's maxmemory no reply is
// kept (ErrBudget, its claim released), so a counter still has room.
func TestRedisBudget(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	rdb := redistest.NewClient(t, srv.URL())
	s := NewRedis(rdb, "", Quota{MemoryPercent: 50})
	ctx := context.Background()
	value := bytes.Repeat([]byte("r"), 50_000)
	var err error
	n := 0
	for ; n < 400; n++ { // 20 MB at most, far past the budget
		if err = s.Put(ctx, fmt.Sprint("c", n), "k", value, time.Minute); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("after %d replies of 50 kB: %v, want ErrBudget", n, err)
	}
	if got := rdb.Exists(ctx, "throttle:idem:{c"+fmt.Sprint(n)+"}:k").Val(); got != 0 {
		t.Errorf("the refused reply was kept")
	}
	if err := rdb.Set(ctx, "throttle:{client/x}:counter", 1, time.Minute).Err(); err != nil {
		t.Errorf("a counter past the records' budget: %v, want room", err)
	}
}
