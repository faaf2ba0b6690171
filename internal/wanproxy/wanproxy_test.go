package wanproxy_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/wanproxy"
)

// server is a loopback listener owned by a test: each connection it
// accepts goes to handle (in its own goroutine), which must return once
// the connection is closed or done is; the listener, the connections and
// the goroutines end with the test.
func server(t *testing.T, handle func(c net.Conn, done <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c, done)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(done)
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echo copies what it reads back.
func echo(c net.Conn, _ <-chan struct{}) { _, _ = io.Copy(c, c) }

// startProxy is wanproxy.New closed when the test ends.
func startProxy(t *testing.T, target string, o wanproxy.Options) *wanproxy.Proxy {
	t.Helper()
	p, err := wanproxy.New(target, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// dial connects to addr, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes one byte to c and returns how long its echo took.
func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	began := time.Now()
	if _, err := c.Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return time.Since(began)
}

// TestDelay: round trips through the proxy to an echo server take at
// least twice Delay − Jitter (a chunk is never early), and their median is
// near twice Delay (the upper bound is loose: a busy machine schedules
// late, never early); SetDelay applies to what is read after it.
func TestDelay(t *testing.T) {
	p := startProxy(t, server(t, echo), wanproxy.Options{Delay: 40 * time.Millisecond, Jitter: 10 * time.Millisecond})
	c := dial(t, p.Addr())
	var rtts []time.Duration
	for range 25 {
		rtts = append(rtts, roundTrip(t, c))
	}
	slices.Sort(rtts)
	t.Logf("40 ms ± 10 ms each way: round trips %v … %v, median %v", rtts[0], rtts[len(rtts)-1], rtts[len(rtts)/2])
	if rtts[0] < 60*time.Millisecond {
		t.Errorf("a round trip took %v, want at least 2 × (40 ms − 10 ms)", rtts[0])
	}
	if med := rtts[len(rtts)/2]; med > 200*time.Millisecond {
		t.Errorf("median round trip %v, want about 80 ms (2 × 40 ms ± 2 × 10 ms)", med)
	}
	if rtts[0] == rtts[len(rtts)-1] {
		t.Errorf("every round trip took %v: no jitter", rtts[0])
	}

	p.SetDelay(150*time.Millisecond, 0)
	if got := roundTrip(t, c); got < 300*time.Millisecond {
		t.Errorf("after SetDelay(150 ms, 0) a round trip took %v, want at least 300 ms", got)
	}
	p.SetDelay(0, 0)
	if got := roundTrip(t, c); got >= 300*time.Millisecond {
		t.Errorf("after SetDelay(0, 0) a round trip took %v, want well under 300 ms", got)
	}
}

// TestOrderUnderJitter: a stream of numbered words written one at a time,
// through a proxy whose jitter is as large as its delay (each chunk's own
// delay anywhere from 0 to 10 ms), comes back from an echo server whole and
// in order.
func TestOrderUnderJitter(t *testing.T) {
	p := startProxy(t, server(t, echo), wanproxy.Options{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond})
	c := dial(t, p.Addr())
	const n = 3000
	errc := make(chan error, 1)
	go func() {
		var buf [4]byte
		for i := range uint32(n) {
			binary.BigEndian.PutUint32(buf[:], i)
			if _, err := c.Write(buf[:]); err != nil {
				errc <- err
				return
			}
			if i%8 == 0 {
				time.Sleep(50 * time.Microsecond) // separate reads, so chunks get their own delays
			}
		}
		errc <- nil
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, 4*n)
	_, rerr := io.ReadFull(c, got)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	for i := range uint32(n) {
		if w := binary.BigEndian.Uint32(got[4*i:]); w != i {
			t.Fatalf("word %d of the echo is %d: bytes reordered", i, w)
		}
	}
}

// TestCutAndHeal: while the proxy is cut nothing passes either way — on a
// connection made before the cut and on one made during it — and the
// connections stay open; after Heal what was written meanwhile arrives,
// in order, then what is written after; a side that closed its end during
// the cut has its bytes delivered, then the close (EOF), as TCP would.
func TestCutAndHeal(t *testing.T) {
	accepted := make(chan net.Conn, 4)
	p := startProxy(t, server(t, func(c net.Conn, done <-chan struct{}) {
		accepted <- c // the test reads and writes it
		<-done
	}), wanproxy.Options{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond})
	// The upstream side of a new client connection.
	upstream := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy did not connect to the server")
			return nil
		}
	}
	// read reads want from c within 10 s.
	read := func(c net.Conn, want string) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	// nothing checks that c has nothing to read for a while: on a cut
	// link nothing ever arrives, so the wait cannot make the test flaky.
	nothing := func(c net.Conn, what string) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := c.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: read %d bytes, %v while the link is cut, want nothing", what, n, err)
		}
	}
	write := func(c net.Conn, s string) {
		t.Helper()
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	client := dial(t, p.Addr())
	up := upstream()
	write(client, "hello")
	read(up, "hello")

	p.Cut()
	write(client, "c1")
	write(up, "s1")
	late := dial(t, p.Addr()) // accepted, connected, and cut
	lateUp := upstream()
	write(late, "late")
	closing := dial(t, p.Addr())
	closingUp := upstream()
	write(closing, "bye")
	closing.(*net.TCPConn).CloseWrite()
	nothing(up, "client → server")
	nothing(client, "server → client")
	nothing(lateUp, "a connection made during the cut")
	nothing(closingUp, "a connection closed during the cut")
	write(client, "c2")

	healed := time.Now()
	p.Heal()
	read(up, "c1c2")
	if took := time.Since(healed); took < 20*time.Millisecond {
		t.Errorf("held bytes arrived %v after the heal, want at least the delay (20 ms)", took)
	}
	read(client, "s1")
	read(lateUp, "late")
	read(closingUp, "bye")
	closingUp.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := closingUp.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the held bytes of a side closed during the cut: %d bytes, %v; want EOF", n, err)
	}
	write(client, "after")
	read(up, "after")
	write(up, "back")
	read(client, "back")
}

// TestCloseStopsEverything: Close returns once every goroutine of the
// proxy has ended, with connections open, bytes held by a cut, and a
// writer stuck on a peer that does not read.
func TestCloseStopsEverything(t *testing.T) {
	target := server(t, func(c net.Conn, done <-chan struct{}) {
		<-done // never reads
	})
	p, err := wanproxy.New(target, wanproxy.Options{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	flood := dial(t, p.Addr())
	go func() { // fills the proxy's queue and the sockets; ends when Close resets it
		buf := bytes.Repeat([]byte{'f'}, 1<<16)
		for {
			if _, err := flood.Write(buf); err != nil {
				return
			}
		}
	}()
	for range 3 {
		c := dial(t, p.Addr())
		c.Write([]byte("held"))
	}
	time.Sleep(50 * time.Millisecond)
	p.Cut()
	for range 2 {
		c := dial(t, p.Addr())
		c.Write([]byte("held"))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if left := proxyGoroutines(); left != "" {
		t.Fatalf("goroutines of the proxy after Close:\n%s", left)
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the proxy still accepts connections after Close")
	}
}

// proxyGoroutines are the stacks of the goroutines running in the
// package's code (not its tests'): the test's only proxy is closed. A
// goroutine that has called wg.Done is still on its way out when Close
// returns, so it waits up to a second for those to be gone.
func proxyGoroutines() string {
	var left string
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		if left = goroutinesIn("/internal/wanproxy."); left == "" || time.Now().After(deadline) {
			return left
		}
	}
}

// goroutinesIn are the stacks of the goroutines with a frame in pkg.
func goroutinesIn(pkg string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, pkg) {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
