package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// reservationRule makes rule name on the replicas and waits until each
// knows it.
func (c *replicaSet) reservationRule(t *testing.T, name, body string) {
	t.Helper()
	if code, out := c.post(c.replicas[0], "/rules", body); code != http.StatusCreated {
		t.Fatalf("POST /rules %s: %d %v", body, code, out)
	}
	for _, r := range c.replicas {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, _ := c.post(r, "/check", `{"identifier":"probe","rule":"`+name+`","hits":0}`)
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s does not know rule %s after 10 s", r.URL, name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// hourRoom waits, when less than need is left of the current hour, for the
// next one: a test's window must not roll over while it runs.
func hourRoom(need time.Duration) {
	now := time.Now()
	if end := now.Truncate(time.Hour).Add(time.Hour); end.Sub(now) < need {
		time.Sleep(time.Until(end) + 100*time.Millisecond)
	}
}

// TestReservationsCloseTheRace: 200 clients at once, over 3 replicas, each
// reserve 1,000 of a budget of 10,000 (reserve_ttl 30) and commit a random
// 0 to 1,500 of it after a random pause, again and again: never more than
// 10 reservations are outstanding at once (none is admitted while counted
// + held + 1,000 pass 10,000), and at the end Redis counts exactly the sum
// of the commits. A fixed window, and a token bucket of capacity 10,000
// whose refill (0.001 a second) is below 0.1 over the test.
func TestReservationsCloseTheRace(t *testing.T) {
	c := startCluster(t, 3)
	rdb := redistest.NewClient(t, c.redis.URL())
	hourRoom(2 * time.Minute)
	c.reservationRule(t, "tokens", `{"name":"tokens","algorithm":"fixed_window","limit":10000,"window":3600}`)
	c.reservationRule(t, "bucket", `{"name":"bucket","algorithm":"token_bucket","limit":10000,"window":3600,"refill_rate":0.001}`)
	for _, rule := range []string{"tokens", "bucket"} {
		t.Run(rule, func(t *testing.T) {
			made, most, committed := c.reserveAndCommit(t, rule, 200, 3*time.Second)
			t.Logf("%s: %d reservations made, at most %d outstanding at once, %d committed in all", rule, made, most, committed)
			if most > 10 {
				t.Errorf("%d reservations of 1,000 outstanding at once on a budget of 10,000: want at most 10", most)
			}
			if made < 10 {
				t.Errorf("only %d reservations made", made)
			}
			used := usedInRedis(t, rdb, rule)
			if diff := used - float64(committed); diff < -0.1 || diff > 0.1 {
				t.Errorf("Redis counts %v used, the commits sum to %d", used, committed)
			}
		})
	}
}

// reserveAndCommit runs clients that each reserve 1,000 of rule and commit
// a random 0 to 1,500 of it until d has passed. It returns how many
// reservations were made, the most seen outstanding at once (counted from
// the admission's reply to the commit's sending: never more than Redis
// held), and the sum of the commits.
func (c *replicaSet) reserveAndCommit(t *testing.T, rule string, clients int, d time.Duration) (made, most, committed int64) {
	var outstanding, mostSeen, sum, n atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				r := c.replicas[rand.IntN(len(c.replicas))]
				code, out := c.post(r, "/check", `{"identifier":"llm","rule":"`+rule+`","hits":1000,"reserve_ttl":30}`)
				id, _ := out["reservation_id"].(string)
				if code != http.StatusOK || id == "" {
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					continue
				}
				n.Add(1)
				now := outstanding.Add(1)
				for m := mostSeen.Load(); now > m && !mostSeen.CompareAndSwap(m, now); m = mostSeen.Load() {
				}
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				hits := rand.Int64N(1501)
				outstanding.Add(-1)
				code, out = c.post(c.replicas[(i+1)%len(c.replicas)], "/reservations/"+id+"/commit", `{"hits":`+strconv.FormatInt(hits, 10)+`}`)
				if code != http.StatusOK {
					t.Errorf("commit of %d: %d %v", hits, code, out)
					return
				}
				sum.Add(hits)
			}
		}()
	}
	wg.Wait()
	return n.Load(), mostSeen.Load(), sum.Load()
}

// usedInRedis reads what Redis counts used of rule's limit on "llm" (the
// test's own Redis): the window's count (fixed window "tokens"), or the
// capacity less the tokens (token bucket "bucket").
func usedInRedis(t *testing.T, rdb *redis.Client, rule string) float64 {
	t.Helper()
	ctx := context.Background()
	pattern := "*llm}:tb:n:rule:bucket"
	if rule == "tokens" { // (not /register's counter, of the same hour)
		pattern = "*llm}:fw:n:rule:tokens@3600000000:" + strconv.FormatInt(time.Now().Unix()/3600, 10)
	}
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the counter's keys: %v, %v", keys, err)
	}
	if rule == "tokens" {
		n, err := rdb.Get(ctx, keys[0]).Float64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tokens, err := rdb.HGet(ctx, keys[0], "t").Float64()
	if err != nil {
		t.Fatal(err)
	}
	return 10000 - tokens
}

// TestReservationsExpire: a reservation never committed frees its quota
// within its TTL + 1 s, read through another replica: one made on a
// replica that lives on, and one made on a replica killed with kill -9
// right after (the others' sweepers give it back); a commit after the
// expiry is 410 RESERVATION_EXPIRED and counts nothing.
func TestReservationsExpire(t *testing.T) {
	c := startCluster(t, 3)
	hourRoom(time.Minute)
	c.reservationRule(t, "exp", `{"name":"exp","algorithm":"fixed_window","limit":10000,"window":3600}`)
	reserve := func(r int, id string) (string, time.Time) {
		code, out := c.post(c.replicas[r], "/check", `{"identifier":"`+id+`","rule":"exp","hits":5000,"reserve_ttl":2}`)
		rid, _ := out["reservation_id"].(string)
		if code != http.StatusOK || rid == "" {
			t.Fatalf("reserve on replica %d: %d %v", r, code, out)
		}
		return rid, time.Now()
	}
	remaining := func(id string) float64 {
		code, out := c.post(c.replicas[1], "/check", `{"identifier":"`+id+`","rule":"exp","hits":0}`)
		if code != http.StatusOK {
			t.Fatalf("peek %s: %d %v", id, code, out)
		}
		return out["remaining"].(float64)
	}
	lived, livedAt := reserve(2, "lives")
	_, killedAt := reserve(0, "killed")
	if err := c.replicas[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.replicas[0].Exited
	for _, tc := range []struct {
		id   string
		made time.Time
	}{{"lives", livedAt}, {"killed", killedAt}} {
		if got := remaining(tc.id); got != 5000 && time.Since(tc.made) < 2*time.Second {
			t.Errorf("%s: %v left while held, want 5000", tc.id, got)
		}
		for remaining(tc.id) != 10000 {
			if time.Since(tc.made) > 3*time.Second {
				t.Fatalf("%s: the reservation of 2 s still holds its quota %v after it was made", tc.id, time.Since(tc.made))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s: quota back %v after the reservation (TTL 2 s)", tc.id, time.Since(tc.made).Round(time.Millisecond))
	}
	code, out := c.post(c.replicas[1], "/reservations/"+lived+"/commit", `{"hits":100}`)
	if code != http.StatusGone || out["code"] != "RESERVATION_EXPIRED" {
		t.Errorf("commit after the expiry: %d %v, want 410 RESERVATION_EXPIRED", code, out)
	}
	if got := remaining("lives"); got != 10000 {
		t.Errorf("after the late commit: %v left, want 10000", got)
	}
}
