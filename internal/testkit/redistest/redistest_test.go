package redistest

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLaunchOnATakenPort: a server that cannot bind its port is seen exiting
// at once (Start then tries another port), not waited for 10 s.
func TestLaunchOnATakenPort(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found: run the tests via scripts/with-test-services.sh (make test)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &Server{t: t, bin: bin, dir: t.TempDir(), Port: l.Addr().(*net.TCPAddr).Port}
	defer s.Stop()
	start := time.Now()
	err = s.launch()
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("launch on a taken port: %v, want the server's exit", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("launch took %v to see the exit", d)
	}
	// Start finds a free port.
	if s := Start(t); s.PID() == 0 {
		t.Fatal("Start: no server")
	}
}
