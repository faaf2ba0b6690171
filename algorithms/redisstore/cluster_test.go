package redisstore

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// TestKeySlot: the store computes a key's slot as Redis does (CRC16 of the
// hash tag), so it routes every key to the master that serves it.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                     0,
		"123456789":            12739, // CRC-16/XMODEM's check value 0x31C3, mod 16384
		"{user1000}.following": keySlot("user1000"),
		"foo{}{bar}":           keySlot("foo{}{bar}"),
		"foo{{bar}}zap":        keySlot("{bar"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestGuardClusterFailover: a master with a replica is killed; its keys are
// answered by the failure policy while the other masters' keys are decided
// by Redis, and once the replica has taken over (the Cluster promotes it
// after cluster-node-timeout), the guard finds it and decides there within
// 2 s, with no traffic needed to close anything.
func TestGuardClusterFailover(t *testing.T) {
	masters := redistest.StartClusterServers(t)
	replica := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
		"--cluster-require-full-coverage", "no")
	ctx := context.Background()
	m0 := redis.NewClient(&redis.Options{Addr: masters[0].Addr()})
	defer m0.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rc.Close()
	id, err := m0.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cli, "--cluster", "add-node", replica.Addr(), masters[0].Addr(), "--cluster-slave", "--cluster-master-id", id).CombinedOutput(); err != nil {
		t.Fatalf("add the replica: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync with master 0: %s", info)
		}
	}

	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 200 * time.Millisecond, MaxRedirects: 1})
	defer cc.Close()
	st := New(cc, Options{Coalesce: 2})
	defer st.Close()
	g, err := NewGuard(st, GuardOptions{Mode: algorithms.FailClosed, Timeout: 200 * time.Millisecond, BreakerMinCalls: 2, OpenFor: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// Identifiers on master 0 and on the others.
	scope := uniqueScope(t)
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Hour}
	onDead, onLive := []string{}, []string{}
	st.route.ready(ctx)
	for i := 0; len(onDead) < 3 || len(onLive) < 3; i++ {
		id := fmt.Sprintf("user-%d", i)
		switch st.route.masterOf(st.indexKey(scope, id)).name {
		case masters[0].Addr():
			if len(onDead) < 3 {
				onDead = append(onDead, id)
			}
		case "unassigned":
			t.Fatalf("%s: no master for its slot", id)
		default:
			if len(onLive) < 3 {
				onLive = append(onLive, id)
			}
		}
	}
	check := func(id string) algorithms.Decision {
		t.Helper()
		ds, err := g.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: id}, Limit: limit, Hits: 1}})
		if err != nil {
			t.Fatalf("check %s: %v", id, err)
		}
		return ds[0]
	}
	for _, id := range append(onDead, onLive...) {
		if d := check(id); !d.Allowed || d.Degraded {
			t.Fatalf("%s before the kill: %+v", id, d)
		}
	}

	// Replication is asynchronous: a failover can lose the last writes.
	// Here the replica has them all before the kill: its offset reaches the
	// master's (WAIT would only wait for this connection's writes).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if replOffset(t, m0, "master_repl_offset") == replOffset(t, rc, "slave_repl_offset") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not catch up with master 0 within 10s")
		}
	}
	masters[0].Stop()
	killed := time.Now()
	for range 3 {
		for _, id := range onDead {
			if d := check(id); d.Allowed || !d.Degraded {
				t.Errorf("%s on the dead master: %+v, want rejected by FAILURE_MODE=closed", id, d)
			}
		}
		for _, id := range onLive {
			if d := check(id); !d.Allowed || d.Degraded {
				t.Errorf("%s on a live master: %+v, want decided by Redis", id, d)
			}
		}
	}
	if !g.Degraded() {
		t.Error("no circuit open with a master dead")
	}

	// The replica takes over; when it serves, the guard must follow.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		role, _ := rc.Do(ctx, "ROLE").Slice()
		if len(role) > 0 && role[0] == "master" && clusterReady(ctx, rc) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica was not promoted within 20s")
		}
	}
	promoted := time.Now()
	t.Logf("replica promoted and serving %v after the kill", promoted.Sub(killed))
	for !(st.route.masterOf(st.indexKey(scope, onDead[0])).name == replica.Addr() && !g.Degraded()) {
		if time.Since(promoted) > 2*time.Second {
			t.Fatalf("2s after the promotion: %s routes to %s, circuits open: %v", onDead[0], st.route.masterOf(st.indexKey(scope, onDead[0])).name, g.Degraded())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the guard routes to the promoted replica, every circuit closed, %v after the promotion", time.Since(promoted))
	// The replica had the master's counts: each identifier counted 1 of 5.
	for _, id := range onDead {
		if d := check(id); !d.Allowed || d.Degraded || d.Remaining != 3 {
			t.Errorf("%s on the promoted replica: %+v, want allowed by Redis with 3 remaining", id, d)
		}
	}
}

// TestClusterAllOrNothingAcrossMasters: a group whose requests live on two
// masters. Each master counts its own part; when the other master's part is
// over, what this one counted is refunded, so the wide limit ends where it
// would on one node.
func TestClusterAllOrNothingAcrossMasters(t *testing.T) {
	cc := newClusterClient(t)
	s := New(cc, Options{Coalesce: 2})
	defer s.Close()
	ctx := context.Background()
	s.route.ready(ctx)
	scope := uniqueScope(t)
	user := "user-0"
	ip := ""
	for i := 0; ip == ""; i++ {
		if id := fmt.Sprintf("10.0.0.%d", i); s.route.masterOf(s.indexKey(scope, id)) != s.route.masterOf(s.indexKey(scope, user)) {
			ip = id
		}
	}
	for _, wide := range storetest.WideLimits {
		narrow := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}
		for i := range 4 {
			ds, err := s.Check(ctx, []algorithms.Request{
				{Key: algorithms.Key{Scope: scope, Identifier: user, Name: string(wide.Algorithm)}, Limit: narrow, Hits: 1, AllOrNothing: true, Unindexed: true, Counting: algorithms.CountThenRefund},
				{Key: algorithms.Key{Scope: scope, Identifier: ip, Name: string(wide.Algorithm)}, Limit: wide, Hits: 1, AllOrNothing: true, Unindexed: true, Counting: algorithms.CountThenRefund},
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := i == 0; ds[0].Allowed != want || ds[1].Counted != want || !ds[1].Allowed {
				t.Errorf("%s, request %d: %+v; want the user limit allowed=%v and the ip limit within, counted=%v", wide.Algorithm, i, ds, want, want)
			}
		}
		ds, err := s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: ip, Name: string(wide.Algorithm)}, Limit: wide, Unindexed: true, Counting: algorithms.CountThenRefund}})
		if err != nil || ds[0].Remaining != 99 {
			t.Errorf("%s: the ip limit after 4 requests, 3 of them void: %+v %v, want 99 left", wide.Algorithm, ds, err)
		}
	}
}

// replOffset reads a replication offset from INFO replication.
func replOffset(t *testing.T, c *redis.Client, field string) string {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO replication has no %s:\n%s", field, info)
	return ""
}
