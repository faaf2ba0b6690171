package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The reference service's Redis settings, through the built binary started
// as a deployment of envoyproxy/ratelimit starts it (/bin/ratelimit, no
// arguments, the deployment's environment word for word), decided through
// Envoy's gRPC client, counted in the Redis the settings name.

// refYAML has a limit per minute and one per second, as the reference's
// units say them.
const refYAML = `domain: ref
descriptors:
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 2}
`

// refServer is a Throttle started as the reference service is, and its
// gRPC client.
type refServer struct {
	*throttletest.Server
	rls rlsv3.RateLimitServiceClient
}

// startRef runs the binary as /bin/ratelimit with refYAML in
// DESCRIPTORS_DIR, free ports, LOG_LEVEL=debug (as Istio's sample: every
// line a password could slip into), and env.
func startRef(t *testing.T, env ...string) refServer {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ref.yaml"), []byte(refYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s := throttletest.StartReference(t, append([]string{"PORT=" + strconv.Itoa(testkit.FreePort(t)), "GRPC_PORT=" + strconv.Itoa(testkit.FreePort(t)),
		"DESCRIPTORS_DIR=" + dir, "LOG_LEVEL=debug", "USE_STATSD=false"}, env...)...)
	return refServer{Server: s, rls: rlsv3.NewRateLimitServiceClient(plainGRPC(t, s.GRPCAddr))}
}

// desc is a descriptor key=value; hits, when not 0, its own hits_addend.
func desc(key, value string, hits uint64) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
	if hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(hits)
	}
	return d
}

// check sends one ShouldRateLimit of descs and returns its codes: the
// overall one, then each descriptor's with its remaining count, such as
// "OVER_LIMIT OK/2 OVER_LIMIT/0".
func (s refServer) check(t *testing.T, descs ...*rlcommon.RateLimitDescriptor) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ref", Descriptors: descs})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	out := []string{resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		out = append(out, st.GetCode().String()+"/"+strconv.Itoa(int(st.GetLimitRemaining())))
	}
	return strings.Join(out, " ")
}

// checks sends n calls of descs and returns their codes.
func (s refServer) checks(t *testing.T, n int, descs ...*rlcommon.RateLimitDescriptor) []string {
	t.Helper()
	sameMinute()
	var out []string
	for range n {
		out = append(out, s.check(t, descs...))
	}
	return out
}

// sameMinute waits for the next minute when this one ends in under two
// seconds, so that the checks that follow count in one window of a
// per-minute limit (TestReferenceRedisCluster's four checks once straddled
// 00:25:00 and the fourth was admitted in the new window).
func sameMinute() {
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 2*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// wantCodes fails the test unless got is want.
func wantCodes(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
}

// counters returns the window counters of descriptor value on the Redis
// o reaches, by key.
func counters(t *testing.T, o *redis.Options, value string) map[string]int64 {
	t.Helper()
	rdb := redis.NewClient(o)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, "*"+value+"*").Result()
	if err != nil {
		t.Fatalf("KEYS on %s: %v", o.Addr, err)
	}
	out := map[string]int64{}
	for _, k := range keys {
		if out[k], err = rdb.Get(ctx, k).Int64(); err != nil {
			t.Fatalf("GET %s on %s: %v", k, o.Addr, err)
		}
	}
	return out
}

// wantCount fails the test unless value has one counter on o, holding n
// (n = 0: no counter at all).
func wantCount(t *testing.T, what string, o *redis.Options, value string, n int64) {
	t.Helper()
	got := counters(t, o, value)
	switch {
	case n == 0 && len(got) == 0:
	case len(got) != 1:
		t.Errorf("%s: counters of %s on %s: %v, want one holding %d", what, value, o.Addr, got, n)
	default:
		for k, v := range got {
			if v != n {
				t.Errorf("%s: counter %s on %s holds %d, want %d", what, k, o.Addr, v, n)
			}
		}
	}
}

// unique is a descriptor value no other test uses.
func unique(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// noSecrets fails the test when the server's logs show any of secrets.
func noSecrets(t *testing.T, s refServer, secrets ...string) {
	t.Helper()
	logs := s.Logs.String()
	for _, secret := range secrets {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs show the password %q:\n%s", secret, logs)
		}
	}
}

// TestReferenceRedisIstio: Istio's sample (REDIS_SOCKET_TYPE=tcp,
// REDIS_URL=host:port, no scheme) starts Throttle, which counts there: 3
// per minute admitted, the 4th rejected and not counted, one counter
// holding 3.
func TestReferenceRedisIstio(t *testing.T) {
	srv := redistest.Start(t)
	s := startRef(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr())
	v := unique(t, "istio")
	wantCodes(t, "minute", s.checks(t, 4, desc("minute", v, 0)), "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0")
	wantCount(t, "istio", &redis.Options{Addr: srv.Addr()}, v, 3)
}

// TestReferenceRedisUnixSocket: REDIS_SOCKET_TYPE=unix with a socket's
// path, as the reference's default (a nutcracker socket); and a path
// alone, unix inferred.
func TestReferenceRedisUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.Start(t, "--unixsocket", sock, "--unixsocketperm", "700")
	for _, env := range [][]string{{"REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + sock}, {"REDIS_URL=" + sock}} {
		s := startRef(t, env...)
		v := unique(t, "unix")
		wantCodes(t, strings.Join(env, " "), s.checks(t, 4, desc("minute", v, 0)), "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0")
		wantCount(t, strings.Join(env, " "), &redis.Options{Network: "unix", Addr: sock}, v, 3)
	}
}

// TestReferenceRedisAuth: REDIS_AUTH as a password (requirepass) and as
// user:password (an ACL user) counts in a Redis that requires it; a wrong
// one is refused by Redis and decided by FAILURE_MODE (open), counting
// nothing. No password shows in the logs, right or wrong.
func TestReferenceRedisAuth(t *testing.T) {
	pw, userPW, wrong := unique(t, "Pw-"), unique(t, "UserPw-"), unique(t, "WrongPw-")
	srv := redistest.Start(t, "--requirepass", pw, "--user", "app", "on", ">"+userPW, "~*", "&*", "+@all")
	for _, tt := range []struct {
		name, auth string
		want       []string
		count      int64
	}{
		{"password", pw, []string{"OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0"}, 3},
		{"user:password", "app:" + userPW, []string{"OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0"}, 3},
		// FAILURE_MODE=open: admitted, the limit minus the hits remaining.
		{"wrong password", "app:" + wrong, []string{"OK OK/2", "OK OK/2", "OK OK/2", "OK OK/2"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startRef(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr(), "REDIS_AUTH="+tt.auth)
			v := unique(t, "auth")
			wantCodes(t, tt.name, s.checks(t, 4, desc("minute", v, 0)), tt.want...)
			wantCount(t, tt.name, &redis.Options{Addr: srv.Addr(), Password: pw}, v, tt.count)
			if tt.count == 0 && !strings.Contains(s.Logs.String(), "WRONGPASS") {
				t.Errorf("the logs do not say Redis refused the password:\n%s", s.Logs.String())
			}
			noSecrets(t, s, pw, userPW, wrong)
		})
	}
}

// TestReferenceRedisCluster: REDIS_TYPE=cluster with the nodes as a list
// counts on a real Cluster of three masters, each key on its slot's
// master, every outcome exact.
func TestReferenceRedisCluster(t *testing.T) {
	masters := redistest.StartClusterServers(t)
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr())
	}
	s := startRef(t, "REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(addrs, ","))
	onMaster := map[int]int{}
	for i := 0; i < 12 || len(onMaster) < 3; i++ {
		if i == 100 {
			t.Fatalf("100 values did not cover the three masters: %v", onMaster)
		}
		v := unique(t, "cluster")
		wantCodes(t, v, s.checks(t, 4, desc("minute", v, 0)), "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0")
		m := masterOf(t, masters, v)
		if m < 0 {
			t.Fatalf("no master holds a key of %s", v)
		}
		onMaster[m]++
		wantCount(t, v, &redis.Options{Addr: masters[m].Addr()}, v, 3)
	}
}

// TestReferenceRedisSentinel: REDIS_TYPE=sentinel with mymaster,host:port,
// REDIS_AUTH the master's password and REDIS_SENTINEL_AUTH the Sentinel's,
// counts on the master the Sentinel names; no password shows in the logs.
func TestReferenceRedisSentinel(t *testing.T) {
	masterPW, sentinelPW := unique(t, "MasterPw-"), unique(t, "SentinelPw-")
	master := redistest.Start(t, "--requirepass", masterPW)
	sentinel := redistest.StartSentinel(t, master, "mymaster", "sentinel auth-pass mymaster "+masterPW, "requirepass "+sentinelPW)
	s := startRef(t, "REDIS_TYPE=sentinel", "REDIS_URL=mymaster,"+sentinel, "REDIS_AUTH="+masterPW, "REDIS_SENTINEL_AUTH="+sentinelPW)
	v := unique(t, "sentinel")
	wantCodes(t, "sentinel", s.checks(t, 4, desc("minute", v, 0)), "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0")
	wantCount(t, "sentinel", &redis.Options{Addr: master.Addr(), Password: masterPW}, v, 3)
	noSecrets(t, s, masterPW, sentinelPW)
}

// TestReferenceRedisPerSecond: with REDIS_PERSECOND, a per-second
// descriptor's counter is only in the per-second Redis and a per-minute
// one's only in the main Redis; a request with both that one of them
// rejects counts nothing in the other; /ready asks both.
func TestReferenceRedisPerSecond(t *testing.T) {
	main, perSecond := redistest.Start(t), redistest.Start(t)
	s := startRef(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+main.Addr(),
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+perSecond.Addr())
	mainOpts, perSecondOpts := &redis.Options{Addr: main.Addr()}, &redis.Options{Addr: perSecond.Addr()}
	m, sec := unique(t, "minute"), unique(t, "second")
	wantCodes(t, "minute alone", s.checks(t, 1, desc("minute", m, 0)), "OK OK/2")
	startOfSecond(t)
	wantCodes(t, "second alone", s.checks(t, 1, desc("second", sec, 0)), "OK OK/1")
	wantCount(t, "minute alone, main", mainOpts, m, 1)
	wantCount(t, "minute alone, per-second", perSecondOpts, m, 0)
	wantCount(t, "second alone, per-second", perSecondOpts, sec, 1)
	wantCount(t, "second alone, main", mainOpts, sec, 0)

	// The per-second limit rejects 3 hits (of 2 a second): the minute's
	// 3 of 3 would fit, and must not count.
	m, sec = unique(t, "minute"), unique(t, "second")
	wantCodes(t, "both, second over", s.checks(t, 1, desc("minute", m, 3), desc("second", sec, 3)), "OVER_LIMIT OK/3 OVER_LIMIT/2")
	wantCount(t, "both, second over: main", mainOpts, m, 0)
	wantCount(t, "both, second over: per-second", perSecondOpts, sec, 0)
	// The minute limit rejects 4 hits (of 3): the second's one hit must
	// not count.
	m, sec = unique(t, "minute"), unique(t, "second")
	startOfSecond(t)
	wantCodes(t, "both, minute over", s.checks(t, 1, desc("minute", m, 4), desc("second", sec, 1)), "OVER_LIMIT OVER_LIMIT/3 OK/2")
	wantCount(t, "both, minute over: per-second", perSecondOpts, sec, 0)
	wantCount(t, "both, minute over: main", mainOpts, m, 0)
	// Within both: each counts on its own Redis.
	startOfSecond(t)
	wantCodes(t, "both within", s.checks(t, 1, desc("minute", m, 0), desc("second", sec, 0)), "OK OK/2 OK/1")
	wantCount(t, "both within: main", mainOpts, m, 1)
	wantCount(t, "both within: per-second", perSecondOpts, sec, 1)

	wantReady(t, "both Redis up", s.Server, 1, http.StatusOK, readyOK)
	perSecond.Stop()
	wantReady(t, "per-second Redis stopped", s.Server, 1, http.StatusOK, `{"status":"degraded","checks":{"database":"ok","limiter":"degraded: per-second redis down"}}`)
	// FAILURE_MODE=open for per-second limits only (admitted, the limit
	// minus the hits remaining); the main Redis still decides the others.
	m, sec = unique(t, "minute"), unique(t, "second")
	wantCodes(t, "second, per-second Redis down", s.checks(t, 3, desc("second", sec, 0)), "OK OK/1", "OK OK/1", "OK OK/1")
	wantCodes(t, "minute, per-second Redis down", s.checks(t, 4, desc("minute", m, 0)), "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0")
}

// startOfSecond waits for the next second to begin (and 10 ms more): a
// per-second counter lives until the end of its second (and 0.1 s more),
// so a test that reads one must count in it early.
func startOfSecond(t *testing.T) {
	t.Helper()
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 10*time.Millisecond).Sub(now))
}

// TestReferenceRedisJitter: EXPIRATION_JITTER_MAX_SECONDS=300 spreads the
// counters' TTLs over up to 300 s past their window.
func TestReferenceRedisJitter(t *testing.T) {
	srv := redistest.Start(t)
	s := startRef(t, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr(), "EXPIRATION_JITTER_MAX_SECONDS=300")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	var lo, hi time.Duration
	for i := range 12 {
		v := unique(t, "jitter")
		wantCodes(t, v, s.checks(t, 1, desc("minute", v, 0)), "OK OK/2")
		keys := counters(t, &redis.Options{Addr: srv.Addr()}, v)
		if len(keys) != 1 {
			t.Fatalf("counters of %s: %v, want one", v, keys)
		}
		for k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < 0 || ttl > 61*time.Second+300*time.Second {
				t.Fatalf("counter %s has a TTL of %v, want at most its minute and 300 s", k, ttl)
			}
			if i == 0 {
				lo, hi = ttl, ttl
			}
			lo, hi = min(lo, ttl), max(hi, ttl)
		}
	}
	if hi < 61*time.Second || hi-lo < 30*time.Second {
		t.Errorf("TTLs from %v to %v: not spread past the window by up to 300 s", lo, hi)
	}
}

// TestReferenceRedisTLS: REDIS_TLS=true with REDIS_URL=host:port reaches a
// redis-server serving TLS only with client certificates required, with
// REDIS_TLS_CACERT and the client certificate; so does the per-second Redis
// with REDIS_PERSECOND_TLS=true, and a Cluster given as a list.
func TestReferenceRedisTLS(t *testing.T) {
	r := newRedisTLS(t)
	main, perSecond := redistest.StartTLS(t, r.test), redistest.StartTLS(t, r.test)
	files := []string{"REDIS_TLS_CACERT=" + r.server.CA, "REDIS_TLS_CLIENT_CERT=" + r.client.Cert, "REDIS_TLS_CLIENT_KEY=" + r.client.Key}
	s := startRef(t, append(files, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+main.Addr(), "REDIS_TLS=true",
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_URL="+perSecond.Addr(), "REDIS_PERSECOND_TLS=true")...)
	m, sec := unique(t, "minute"), unique(t, "second")
	startOfSecond(t)
	wantCodes(t, "tls", s.checks(t, 1, desc("minute", m, 0), desc("second", sec, 0)), "OK OK/2 OK/1")
	if r.keysOf(t, m, main.Addr()) != 1 || r.keysOf(t, sec, perSecond.Addr()) != 1 {
		t.Errorf("keys of %s on the main Redis: %d, of %s on the per-second Redis: %d; want one each",
			m, r.keysOf(t, m, main.Addr()), sec, r.keysOf(t, sec, perSecond.Addr()))
	}

	nodes := redistest.StartTLSClusterOf(t, 3, r.test)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	c := startRef(t, append(files, "REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(addrs, ","), "REDIS_TLS=true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true")...)
	v := unique(t, "cluster")
	wantCodes(t, "tls cluster", c.checks(t, 4, desc("minute", v, 0)), "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0")
	if n := r.keysOf(t, v, addrs...); n != 1 {
		t.Errorf("keys of %s on the Cluster: %d, want 1", v, n)
	}
}
