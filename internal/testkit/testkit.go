// Package testkit holds the helpers Throttle's tests share; its packages
// start what the tests need for real: the built binary (throttletest),
// Redis servers and Clusters (redistest), PostgreSQL databases (pgtest),
// certificates (certtest), an xDS control plane (xdstest), npm tools
// (npxtest), the OpenAPI validator (openapitest), Kubernetes manifests
// (manifest). Production code never imports them.
package testkit

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// FreePort returns a TCP port free on the loopback interface now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// MustRead returns the file name ('/'-separated, from the test's package)
// or fails the test.
func MustRead(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RandomHex returns n random bytes in hex.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// DiscardUDP returns the address of a loopback UDP socket that reads and
// drops everything sent to it (a statsd that listens and keeps nothing),
// until the test or benchmark ends.
func DiscardUDP(tb testing.TB) string {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().String()
}

// GetText returns the status, the content type and the body of GET url
// (http.DefaultClient, whose deadline is the test's).
func GetText(t testing.TB, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
