package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel runs a Redis Sentinel on a free loopback port that monitors
// master as name (quorum 1), with the extra sentinel.conf lines conf (such
// as "sentinel auth-pass NAME PASSWORD" or "requirepass PASSWORD"); it is
// stopped when the test ends. It returns the sentinel's address once the
// sentinel knows the master's address.
func StartSentinel(t testing.TB, master *Server, name string, conf ...string) string {
	t.Helper()
	return startSentinel(t, master, name, nil, conf)
}

// StartTLSSentinel is StartSentinel serving TLS only, with client
// certificates required (c), and reaching the master (started with
// StartTLS) over TLS.
func StartTLSSentinel(t testing.TB, master *Server, name string, c TLS, conf ...string) string {
	t.Helper()
	return startSentinel(t, master, name, &c, conf)
}

func startSentinel(t testing.TB, master *Server, name string, c *TLS, conf []string) string {
	t.Helper()
	port := freePort(t, false)
	// The sentinel rewrites its config file, so it must be its own.
	path := filepath.Join(t.TempDir(), "sentinel.conf")
	listen := fmt.Sprintf("port %d\n", port)
	if c != nil {
		listen = fmt.Sprintf("port 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients yes\ntls-replication yes\n",
			port, c.Cert, c.Key, c.CA)
	}
	body := fmt.Sprintf("%sbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\n%s\n", listen, name, master.Port, strings.Join(conf, "\n"))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(master.bin, path, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server --sentinel: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	addr := "127.0.0.1:" + strconv.Itoa(port)
	opt := c.options(addr)
	for _, line := range conf {
		if pass, ok := strings.CutPrefix(line, "requirepass "); ok {
			opt.Password = pass
		}
	}
	rdb := redis.NewSentinelClient(opt)
	defer rdb.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := rdb.GetMasterAddrByName(ctx, name).Result()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not know master %s: %v", addr, name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
