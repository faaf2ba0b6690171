package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// redisTLS is a CA, the certificate files Redis serves, and a client
// certificate of Throttle's, all of the one CA.
type redisTLS struct {
	ca     *certtest.CA
	server certtest.Files
	client certtest.Files
	// test is the configuration of the test's own Redis connections.
	test redistest.TLS
}

func newRedisTLS(t *testing.T) redisTLS {
	t.Helper()
	ca := certtest.NewCA(t, "redis CA")
	server := ca.Localhost(t).Write(t, t.TempDir(), ca)
	clientPair := ca.Issue(t, certtest.Leaf{DNS: []string{"throttle"}})
	return redisTLS{
		ca: ca, server: server, client: clientPair.Write(t, t.TempDir(), ca),
		test: redistest.TLS{Cert: server.Cert, Key: server.Key, CA: server.CA, Client: certtest.ClientTLS(t, ca, "127.0.0.1", &clientPair)},
	}
}

// env are Throttle's settings for Redis at url with the client
// certificate.
func (r redisTLS) env(url string) []string {
	return []string{"REDIS_URL=" + url, "REDIS_TLS_CACERT=" + r.server.CA,
		"REDIS_TLS_CLIENT_CERT=" + r.client.Cert, "REDIS_TLS_CLIENT_KEY=" + r.client.Key}
}

// keysOf counts the keys of user on the Redis nodes at addrs.
func (r redisTLS) keysOf(t *testing.T, user string, addrs ...string) int {
	t.Helper()
	n := 0
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: r.test.Client})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		keys, err := rdb.Keys(ctx, "*"+user+"*").Result()
		cancel()
		rdb.Close()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", addr, err)
		}
		n += len(keys)
	}
	return n
}

func plainGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRedisTLS: Throttle reaches a redis-server that serves TLS only and
// requires client certificates (--tls-auth-clients yes), with its private
// CA and a client certificate, and counts there; without the client
// certificate Redis refuses it.
func TestRedisTLS(t *testing.T) {
	r := newRedisTLS(t)
	srv := redistest.StartTLS(t, r.test)
	s := throttletest.Start(t, append(r.env(srv.URL()), "DESCRIPTORS_DIR="+edgeDir(t), "BACKEND_TIMEOUT=2s", "FAILURE_MODE=closed")...)
	user := assertEdgeDecisions(t, plainGRPC(t, s.GRPCAddr))
	if n := r.keysOf(t, user, srv.Addr()); n == 0 {
		t.Errorf("no key of %s in Redis: the decisions were not made there", user)
	}

	noCert := throttletest.Start(t, "REDIS_URL="+srv.URL(), "REDIS_TLS_CACERT="+r.server.CA, "DESCRIPTORS_DIR="+edgeDir(t), "BACKEND_TIMEOUT=2s")
	if logs := noCert.Logs.String(); !strings.Contains(logs, "Redis does not answer yet") {
		t.Errorf("without a client certificate Redis answered:\n%s", logs)
	}
}

// TestRedisClusterTLS: the same with a Redis Cluster of three masters
// that talk TLS among themselves too: every master the counter store
// routes to is reached with the client certificate.
func TestRedisClusterTLS(t *testing.T) {
	r := newRedisTLS(t)
	nodes := redistest.StartTLSClusterOf(t, 3, r.test)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	url := "rediss://" + addrs[0] + "/0?cluster=true&addr=" + addrs[1] + "&addr=" + addrs[2]
	s := throttletest.Start(t, append(r.env(url), "DESCRIPTORS_DIR="+edgeDir(t), "BACKEND_TIMEOUT=2s", "FAILURE_MODE=closed")...)
	conn := plainGRPC(t, s.GRPCAddr)
	users := map[string]bool{}
	for range 6 { // users whose keys land on more than one master
		users[assertEdgeDecisions(t, conn)] = true
	}
	masters := 0
	for _, addr := range addrs {
		n := 0
		for user := range users {
			n += r.keysOf(t, user, addr)
		}
		if n > 0 {
			masters++
		}
	}
	if masters < 2 {
		t.Errorf("the keys of %d users are on %d master(s), want at least 2", len(users), masters)
	}
	if got := s.Metric(t, "throttle_degraded_decisions_total"); got != 0 {
		t.Errorf("degraded decisions = %v, want 0", got)
	}
}

// TestRedisSentinelTLS: with Sentinel, both the Sentinel and the master it
// names are reached over TLS with the client certificate.
func TestRedisSentinelTLS(t *testing.T) {
	r := newRedisTLS(t)
	master := redistest.StartTLS(t, r.test)
	sentinel := redistest.StartTLSSentinel(t, master, "mymaster", r.test)
	s := throttletest.Start(t, append(r.env("rediss://"+sentinel+"/0?master_name=mymaster"), "DESCRIPTORS_DIR="+edgeDir(t), "BACKEND_TIMEOUT=2s", "FAILURE_MODE=closed")...)
	user := assertEdgeDecisions(t, plainGRPC(t, s.GRPCAddr))
	if n := r.keysOf(t, user, master.Addr()); n == 0 {
		t.Errorf("no key of %s on the master: the decisions were not made there", user)
	}
}

// TestPostgresTLS: DATABASE_URL with pgx's sslmode=verify-full,
// sslrootcert, sslcert and sslkey reaches a PostgreSQL that takes only
// TLS connections with a client certificate (docs/production.md's
// example); without the client certificate it refuses, and Throttle does
// not start.
func TestPostgresTLS(t *testing.T) {
	ca := certtest.NewCA(t, "postgres CA")
	server := ca.Localhost(t).Write(t, t.TempDir(), ca)
	client := ca.Issue(t, certtest.Leaf{CommonName: "postgres"}).Write(t, t.TempDir(), ca)
	pg := pgtest.StartTLSServer(t, pgtest.TLS{Cert: server.Cert, Key: server.Key, CA: server.CA})
	base := "postgres://postgres@127.0.0.1:" + strconv.Itoa(pg.Port) + "/postgres?sslmode=verify-full&sslrootcert=" + server.CA
	s := throttletest.Start(t, "DATABASE_URL="+base+"&sslcert="+client.Cert+"&sslkey="+client.Key)
	s.Register(t, "tls app")
	if got := s.Metric(t, `throttle_db_open_connections`); got < 1 {
		t.Errorf("open database connections = %v", got)
	}

	cmd := throttletest.Command(t, "serve")
	cmd.Env = append(cmd.Env, "DATABASE_URL="+base)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "open database") {
		t.Errorf("without a client certificate: %v\n%s", err, out)
	}
}
