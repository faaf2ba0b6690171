package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
)

// Server is a PostgreSQL server of a test's own, on a free loopback port,
// that the test can stop and start again (an outage) while its clients
// keep the same URL. Its data is thrown away when the test ends.
type Server struct {
	// URL is the server's "postgres" database, as the superuser.
	URL string
	// Port is the server's loopback port.
	Port int

	bin  string // the folder of initdb and postgres
	dir  string // data, sockets, and nothing else
	port int
	cred *syscall.Credential // the postgres user's, when the test runs as root
	logs *logbuf.Buffer
	args []string  // more postgres arguments (StartTLSServer's)
	cmd  *exec.Cmd // nil while stopped
	done chan error
}

// StartServer initialises a throw-away PostgreSQL cluster and starts it. As
// scripts/with-test-services.sh does, it runs PostgreSQL as the postgres
// user when the test runs as root (PostgreSQL refuses to run as root). It
// fails the test when PostgreSQL is not installed.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := initServer(t)
	s.Start(t)
	return s
}

// TLS are the PEM files of StartTLSServer.
type TLS struct {
	Cert, Key, CA string
}

// StartTLSServer is StartServer with ssl=on, serving c's certificate, and
// TCP connections admitted only over TLS with a client certificate that
// c's CA signed and whose common name is the database user
// (pg_hba "hostssl … cert"); URL is unusable, build one with Port.
func StartTLSServer(t testing.TB, c TLS) *Server {
	t.Helper()
	s := initServer(t)
	data := filepath.Join(s.dir, "data")
	for src, dst := range map[string]string{c.Cert: "server.crt", c.Key: "server.key", c.CA: "root.crt"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		s.writeData(t, filepath.Join(data, dst), b)
	}
	s.writeData(t, filepath.Join(data, "pg_hba.conf"), []byte("local all all trust\nhostssl all all 127.0.0.1/32 cert\n"))
	s.args = []string{"-c", "ssl=on", "-c", "ssl_cert_file=server.crt", "-c", "ssl_key_file=server.key", "-c", "ssl_ca_file=root.crt"}
	// Ready when it answers on its socket (TCP takes certificates only).
	s.URL = fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d&sslmode=disable", filepath.Join(s.dir, "sock"), s.port)
	s.Start(t)
	return s
}

// writeData writes a file of the data folder, readable by its owner
// alone (PostgreSQL insists, for the key), owned by the postgres user.
func (s *Server) writeData(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// initServer makes a server's folders and data, not started.
func initServer(t testing.TB) *Server {
	t.Helper()
	bin, err := postgresBin()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "throttle-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{bin: bin, dir: dir, port: testkit.FreePort(t), logs: &logbuf.Buffer{}}
	s.Port = s.port
	if os.Geteuid() == 0 {
		s.cred, err = postgresUser()
		if err != nil {
			t.Fatal(err)
		}
		// The postgres user must reach its data and socket folders.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"data", "sock"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if s.cred != nil {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGQUIT) // immediate shutdown: the data goes anyway
			<-s.done
		}
		if t.Failed() {
			t.Logf("postgres log:\n%s", s.logs.String())
		}
	})
	return s
}

// Start starts the server (again) on its port and returns once it accepts
// connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		t.Fatal("pgtest: Start of a running server")
	}
	args := append([]string{"-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-k", filepath.Join(s.dir, "sock"),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"}, s.args...)
	cmd := s.command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	s.cmd, s.done = cmd, make(chan error, 1)
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			conn.Close(ctx)
			cancel()
			return
		}
		cancel()
		select {
		case werr := <-s.done:
			s.cmd = nil
			t.Fatalf("postgres exited: %v\n%s", werr, s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres did not accept connections in 60s: %v\n%s", err, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down as `pg_ctl stop` does by default (fast:
// sessions are ended, committed data stays) and returns once it is gone.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		t.Fatal("pgtest: Stop of a stopped server")
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("stop postgres: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("postgres still running 60s after SIGINT\n%s", s.logs.String())
	}
	s.cmd = nil
}

// command runs name as the postgres user when the test runs as root.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		cmd.Env = append(os.Environ(), "HOME="+s.dir, "USER=postgres", "LOGNAME=postgres")
	}
	return cmd
}

// postgresBin finds PostgreSQL's programs where Debian installs them, the
// newest version first.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgtest: no /usr/lib/postgresql/*/bin/initdb: run via scripts/with-test-services.sh (make test), which installs PostgreSQL")
}

// postgresUser is the credential of the postgres user, which
// scripts/with-test-services.sh creates when it is missing.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs a postgres user to run PostgreSQL as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
