// Package redistest runs throw-away redis-server processes for tests that
// must stop and restart Redis (failure modes), and hands out the shared test
// Redis that scripts/with-test-services.sh starts.
package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SharedURL returns the URL of the test Redis started by
// scripts/with-test-services.sh, and fails the test when there is none.
func SharedURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("THROTTLE_TEST_REDIS_URL")
	if u == "" {
		t.Fatal("THROTTLE_TEST_REDIS_URL is not set: run the tests via scripts/with-test-services.sh (make test)")
	}
	return u
}

// Server is a redis-server process owned by one test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	Port int
	args []string
	tls  *TLS
	cmd  *exec.Cmd
	// exited is closed when cmd has exited.
	exited chan struct{}
}

// Start runs a new redis-server on a free loopback port, with no
// persistence and the extra arguments args; it is stopped when the test ends.
// A port can be taken between the moment it is found free and the server's
// bind (other test packages start servers too; a Cluster node also binds its
// port + 10000): a server that exits at once is started again on another.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, nil, args)
}

// TLS is how StartTLS serves: only TLS on Port (--port 0 --tls-port), its
// certificate and key, and client certificates required, signed by CA
// (--tls-auth-clients yes; Cluster nodes talk TLS among themselves too).
type TLS struct {
	Cert, Key, CA string // PEM files
	// Client is the configuration of the test's own connections: it
	// trusts CA and presents a client certificate.
	Client *tls.Config
}

// StartTLS is Start serving TLS only; URL is rediss://.
func StartTLS(t testing.TB, c TLS, args ...string) *Server {
	t.Helper()
	return start(t, &c, args)
}

func start(t testing.TB, c *TLS, args []string) *Server {
	t.Helper()
	bin := os.Getenv("THROTTLE_TEST_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			t.Fatal("redis-server not found: run the tests via scripts/with-test-services.sh (make test)")
		}
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: args, tls: c}
	t.Cleanup(s.Stop)
	const attempts = 5
	for i := 1; ; i++ {
		s.Port = freePort(t, slices.Contains(args, "--cluster-enabled"))
		err := s.launch()
		if err == nil {
			return s
		}
		if i == attempts {
			t.Fatalf("redis-server: %v (%d ports tried)", err, attempts)
		}
	}
}

// freePort returns a loopback port free now, and whose port + 10000 (a
// Cluster node's bus) is free too when bus is true.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port
		}
		if port+10000 <= 65535 {
			if b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
				b.Close()
				l.Close()
				return port
			}
		}
		l.Close()
	}
}

// PID is the server's process id (for /proc/PID readings); 0 when stopped.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is redis://host:port/0 (rediss:// with TLS).
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr() + "/0"
	}
	return "redis://" + s.Addr() + "/0"
}

// options are the go-redis options of the test's own connections to addr
// (over TLS when the servers serve it).
func (c *TLS) options(addr string) *redis.Options {
	o := &redis.Options{Addr: addr}
	if c != nil {
		o.TLSConfig = c.Client
	}
	return o
}

// Stop kills the server (as a crash would) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again on the same port and waits until it
// answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.launch(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
}

// launch starts the server on s.Port (stopping it first if it runs) and
// waits until it answers PING; it fails when the server exits first (its
// output says why, e.g. a port in use) or does not answer within 10 s.
func (s *Server) launch() error {
	s.Stop()
	port := []string{"--port", strconv.Itoa(s.Port)}
	if c := s.tls; c != nil {
		port = []string{"--port", "0", "--tls-port", strconv.Itoa(s.Port), "--tls-cert-file", c.Cert, "--tls-key-file", c.Key,
			"--tls-ca-cert-file", c.CA, "--tls-auth-clients", "yes"}
		if slices.Contains(s.args, "--cluster-enabled") {
			port = append(port, "--tls-cluster", "yes", "--tls-replication", "yes")
		}
	}
	cmd := exec.Command(s.bin, append(append(port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir), s.args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A child the server forked (an RDB for a replica) may hold the output
	// pipe past the server's exit: Wait stops waiting for it.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	// Each PING ends at its context's deadline, even on a port whose holder
	// accepts connections and says nothing.
	o := s.tls.options(s.Addr())
	o.ContextTimeoutEnabled, o.MaxRetries = true, -1
	rdb := redis.NewClient(o)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		// NOAUTH is an answer too: the server runs with --requirepass.
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("the server on %s exited: %s", s.Addr(), lastLine(out.String()))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server on %s did not answer: %v", s.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastLine is the last non-empty line of a server's output.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// NewClient returns a client for addr with the timeouts a Throttle replica
// uses, closed when the test ends.
func NewClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(fmt.Errorf("parse %s: %w", url, err))
	}
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = 200 * time.Millisecond
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
