package redistest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartCluster runs a Redis Cluster of three masters (no replicas) on free
// loopback ports for one test, and returns the nodes' addresses once the
// cluster answers cluster_state:ok. It needs redis-cli beside redis-server.
func StartCluster(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for _, s := range StartClusterServers(t) {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// StartClusterServers is StartCluster returning the masters themselves, so
// that a test can kill one and start it again (Restart: the same port and
// folder, so it comes back with its nodes.conf, as the same node). The
// masters go on serving their slots while another is down
// (cluster-require-full-coverage no); a master is judged failing after 1 s
// (cluster-node-timeout).
func StartClusterServers(t testing.TB) []*Server {
	t.Helper()
	return StartClusterOf(t, 3)
}

// StartClusterOf is StartClusterServers with n masters: 1 (one node that
// serves every slot: a Cluster of one shard), or 3 and more.
func StartClusterOf(t testing.TB, n int) []*Server {
	t.Helper()
	return startCluster(t, n, nil)
}

// StartTLSClusterOf is StartClusterOf with nodes serving TLS only (c), to
// clients and to each other.
func StartTLSClusterOf(t testing.TB, n int, c TLS) []*Server {
	t.Helper()
	return startCluster(t, n, &c)
}

func startCluster(t testing.TB, n int, c *TLS) []*Server {
	t.Helper()
	var servers []*Server
	var addrs []string
	for range n {
		s := start(t, c, []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			"--cluster-require-full-coverage", "no"})
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	if n == 1 {
		rdb := redis.NewClient(c.options(addrs[0]))
		err := rdb.Do(context.Background(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err()
		rdb.Close()
		if err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	} else {
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			t.Fatal("redis-cli not found: run the tests via scripts/with-test-services.sh (make test)")
		}
		var args []string
		if c != nil {
			args = []string{"--tls", "--cacert", c.CA, "--cert", c.Cert, "--key", c.Key}
		}
		args = append(append(args, "--cluster", "create"), addrs...)
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
			t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
		}
	}
	// Every node must see the cluster ok (they converge one by one), or
	// a request routed to a late one answers CLUSTERDOWN.
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		rdb := redis.NewClient(c.options(addr))
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := rdb.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				rdb.Close()
				t.Fatalf("cluster node %s not ok within 30s: %v\n%s", addr, err, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
		rdb.Close()
	}
	return servers
}
