// Package wanproxy is a TCP proxy on loopback that makes a link look far
// away, for tests and benchmarks: each chunk it reads is delivered Delay ±
// a uniform Jitter later, never before a chunk read earlier on the same
// connection and direction, and the link can be cut and healed.
//
// A cut is a partition, not a reset: connections stay open (and new ones
// are accepted), nothing passes either way, and what is read meanwhile is
// held and delivered, in order, Delay after the heal — as TCP would
// retransmit it. A side that closes its end (FIN) while the link is cut
// has its held bytes delivered before the close, as TCP would too; a
// connection torn down (an error on either side, or Close) drops what it
// held.
package wanproxy

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Options is how far away the target looks.
type Options struct {
	// Delay is how long after it was read a chunk is delivered, each way
	// (a round trip is twice it).
	Delay time.Duration
	// Jitter spreads each chunk's delay uniformly over Delay ± Jitter
	// (never below 0), without reordering.
	Jitter time.Duration
}

// Proxy forwards 127.0.0.1:port to a target with a delay.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	opts     Options
	cut      bool
	healed   time.Time     // the last Heal
	changed  chan struct{} // closed and replaced at each Cut, Heal
	conns    map[*link]struct{}
	closing  bool
	closeErr error
}

// chunkSize is the most one read takes; queueLen is how many chunks a
// direction holds before it stops reading (the receive window).
const (
	chunkSize = 32 << 10
	queueLen  = 256
	dialLimit = 5 * time.Second
)

// New listens on 127.0.0.1:0 and forwards every connection to target
// (host:port) with opts.
func New(target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, opts: opts,
		changed: make(chan struct{}), conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut stops forwarding: from its return no chunk starts to be delivered
// either way until Heal (a write under way finishes). Connections stay
// open and are accepted; what is read is held.
func (p *Proxy) Cut() { p.setCut(true) }

// Heal forwards again: what was held is delivered Delay after it, in
// order, and what is read from now on Delay ± Jitter after it was read.
func (p *Proxy) Heal() { p.setCut(false) }

func (p *Proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == cut {
		return
	}
	p.cut = cut
	if !cut {
		p.healed = time.Now()
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// SetDelay changes the delay and jitter of what is read from now on.
func (p *Proxy) SetDelay(delay, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.opts = Options{Delay: delay, Jitter: jitter}
}

// Close stops listening, tears every connection down (dropping what they
// held) and returns once every goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		p.wg.Wait()
		return p.closeErr
	}
	p.closing = true
	p.closeErr = p.ln.Close()
	for l := range p.conns {
		l.teardown()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return p.closeErr
}

// accept takes connections until Close.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.DialTimeout("tcp", p.target, dialLimit)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, upstream: up, down: make(chan struct{})}
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			l.teardown()
			return
		}
		p.conns[l] = struct{}{}
		p.wg.Add(5) // two directions of a reader and a writer, and the closer
		p.mu.Unlock()
		l.open.Add(2)
		p.forward(l, c, up)
		p.forward(l, up, c)
		go func() {
			defer p.wg.Done()
			l.open.Wait()
			l.teardown()
			p.mu.Lock()
			delete(p.conns, l)
			p.mu.Unlock()
		}()
	}
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, upstream net.Conn
	open             sync.WaitGroup // one per direction still forwarding
	down             chan struct{}  // closed by teardown
	once             sync.Once
}

// teardown closes both sides (idempotent).
func (l *link) teardown() {
	l.once.Do(func() {
		close(l.down)
		l.client.Close()
		l.upstream.Close()
	})
}

// chunk is what one read took and when it is due.
type chunk struct {
	data   []byte
	readAt time.Time
	due    time.Time
	eof    bool // src closed its end: close dst's after the bytes before
}

// forward moves src → dst: a reader stamps each chunk with its due time,
// a writer delivers them in order. The direction ends when src's end is
// closed and all it sent was delivered (dst's write end is then closed),
// or when either side fails (the link is torn down).
func (p *Proxy) forward(l *link, src, dst net.Conn) {
	queue := make(chan chunk, queueLen)
	go p.read(l, src, queue)
	go p.write(l, dst, queue)
}

// read reads src into queue until src ends or the link is torn down.
func (p *Proxy) read(l *link, src net.Conn, queue chan<- chunk) {
	defer p.wg.Done()
	defer close(queue)
	var last time.Time
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			p.mu.Lock()
			o := p.opts
			p.mu.Unlock()
			d := o.Delay
			if o.Jitter > 0 {
				d += time.Duration(rand.Int64N(int64(2*o.Jitter)+1)) - o.Jitter
			}
			due := now.Add(max(d, 0))
			if due.Before(last) {
				due = last // never before a chunk read earlier
			}
			last = due
			select {
			case queue <- chunk{data: buf[:n], readAt: now, due: due}:
			case <-l.down:
				return
			}
		}
		if errors.Is(err, io.EOF) {
			select {
			case queue <- chunk{eof: true, readAt: time.Now(), due: last}:
			case <-l.down:
			}
			return
		}
		if err != nil {
			l.teardown() // reset, or torn down: what is held is dropped
			return
		}
	}
}

// write delivers queue to dst, each chunk at its due time, none while the
// link is cut, what was held by a cut Delay after the heal.
func (p *Proxy) write(l *link, dst net.Conn, queue <-chan chunk) {
	defer p.wg.Done()
	defer l.open.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range queue {
		if !p.await(l, c, timer) {
			return
		}
		if c.eof {
			if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
				continue // drain the queue: it ends with the reader
			}
			l.teardown()
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.teardown()
			return
		}
	}
}

// await waits until c is due and the link is not cut; false when the
// link was torn down first.
func (p *Proxy) await(l *link, c chunk, timer *time.Timer) bool {
	for {
		p.mu.Lock()
		cut, healed, changed, delay := p.cut, p.healed, p.changed, p.opts.Delay
		p.mu.Unlock()
		if cut {
			select {
			case <-changed:
				continue
			case <-l.down:
				return false
			}
		}
		due := c.due
		// Read before the last heal and not delivered by then: held by the
		// cut, its retransmission crosses the link after the heal.
		if c.readAt.Before(healed) && due.Before(healed.Add(delay)) {
			due = healed.Add(delay)
		}
		wait := time.Until(due)
		if wait <= 0 {
			return true
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			// due: check the link once more (a cut may have begun)
		case <-changed:
			timer.Stop()
		case <-l.down:
			return false
		}
	}
}
