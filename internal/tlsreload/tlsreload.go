// Package tlsreload keeps the TLS material of a listener or of a client
// current: a certificate and its key, and a CA bundle, read from PEM files
// and read again when they change, so that new handshakes get the new files
// while open connections carry on. The files are compared by content every
// Interval, through symlinks (cert-manager and Kubernetes Secret volumes
// swap a symlink). A change that does not load (a key that does not match,
// an unreadable file, a certificate not yet valid) is logged with the file
// and the reason, counted, and the last good material kept.
//
// Serving, a CA bundle turns on client-certificate verification: a client
// must present a certificate that chains to the bundle and, when an
// allow-list is given, carries one of its DNS or URI SANs. Refused
// handshakes are counted by reason (reasons.go).
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// DefaultInterval is how often the files are read again unless
// Options.Interval says otherwise.
const DefaultInterval = 2 * time.Second

// Options describe one listener's or client's TLS files.
type Options struct {
	// Name labels the metrics and the log lines: "grpc", "http", "redis".
	Name string
	// CertFile and KeyFile are a PEM certificate (its chain after it) and
	// its private key. Both or neither; required to serve.
	CertFile, KeyFile string
	// CAFile is a PEM bundle of CA certificates. Serving: clients must
	// present a certificate signed by one of them (mTLS). As a client: the
	// server's certificate must chain to one of them; empty: the system's
	// roots.
	CAFile string
	// AllowedSANs, serving with a CAFile: a client certificate must carry
	// one of these DNS or URI SANs (such as
	// spiffe://cluster.local/ns/gw/sa/envoy); empty: any the CA signed.
	AllowedSANs []string
	// NextProtos are the ALPN protocols served, such as h2 and http/1.1.
	NextProtos []string
	// Interval is how often the files are read again; 0: DefaultInterval.
	Interval time.Duration
	// Log gets a line for every reload and every file that does not load.
	Log *slog.Logger
	// Metrics counts handshakes refused and reloads failed, and shows when
	// the served certificate expires; nil: none.
	Metrics *Metrics
	// Now is the clock certificates are checked against; nil: time.Now.
	Now func() time.Time
}

// Role names which of the files a FileError is about.
type Role string

// The files of Options.
const (
	Cert Role = "certificate"
	Key  Role = "key"
	CA   Role = "CA bundle"
)

// FileError is a file that does not load, and why.
type FileError struct {
	Role Role
	Path string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s %s: %v", e.Role, e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// Reloader holds the material loaded last from the files of its Options and
// loads it again when they change (Run).
type Reloader struct {
	o   Options
	cur atomic.Pointer[material]
	// seen is what the files held at the last attempt to load them, good
	// or not: a file that does not load is reported once, not every poll.
	seen contents
}

// contents are the files' bytes, or the error reading them.
type contents struct {
	cert, key, ca []byte
	err           error
}

func (c contents) same(o contents) bool {
	return bytes.Equal(c.cert, o.cert) && bytes.Equal(c.key, o.key) && bytes.Equal(c.ca, o.ca) &&
		fmt.Sprint(c.err) == fmt.Sprint(o.err)
}

// material is one loaded set of files.
type material struct {
	cert *tls.Certificate // nil without CertFile
	pool *x509.CertPool   // nil without CAFile
	// server is what a listener's handshakes use (nil without cert).
	server *tls.Config
}

// New loads the files of o. An error is a *FileError naming the file.
func New(o Options) (*Reloader, error) {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("tlsreload: a certificate needs its key, and a key its certificate")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{o: o}
	r.seen = r.read()
	m, err := r.load(r.seen)
	if err != nil {
		return nil, err
	}
	r.use(m)
	return r, nil
}

// Run reads the files every Interval until ctx ends, and loads them when
// they changed.
func (r *Reloader) Run(ctx context.Context) error {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Reload()
		}
	}
}

// Reload reads the files and, if they changed since the last attempt,
// loads them: new handshakes use them from then on. A change that does not
// load is logged and counted, and the last good material kept. Run calls
// it; it must not be called concurrently with itself.
func (r *Reloader) Reload() {
	c := r.read()
	if c.same(r.seen) {
		return
	}
	r.seen = c
	m, err := r.load(c)
	if err != nil {
		var fe *FileError
		file := ""
		if errors.As(err, &fe) {
			file = fe.Path
		}
		r.o.Log.Error("TLS files changed but do not load; keeping the last good ones", "tls", r.o.Name, "file", file, "err", err)
		r.o.Metrics.reloadFailed(r.o.Name)
		return
	}
	r.use(m)
	r.o.Log.Info("TLS files reloaded", "tls", r.o.Name, "cert", r.o.CertFile, "ca", r.o.CAFile, "not_after", notAfter(m))
}

// read reads every file of the options (through symlinks).
func (r *Reloader) read() contents {
	var c contents
	for _, f := range []struct {
		role Role
		path string
		dst  *[]byte
	}{{Cert, r.o.CertFile, &c.cert}, {Key, r.o.KeyFile, &c.key}, {CA, r.o.CAFile, &c.ca}} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			c.err = &FileError{Role: f.role, Path: f.path, Err: err}
			return c
		}
		*f.dst = b
	}
	return c
}

// load parses what read returned.
func (r *Reloader) load(c contents) (*material, error) {
	if c.err != nil {
		return nil, c.err
	}
	m := &material{}
	if r.o.CertFile != "" {
		cert, err := r.loadPair(c.cert, c.key)
		if err != nil {
			return nil, err
		}
		m.cert = cert
	}
	if r.o.CAFile != "" {
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(c.ca) {
			return nil, &FileError{Role: CA, Path: r.o.CAFile, Err: errors.New("no PEM certificate in it")}
		}
	}
	if m.cert != nil {
		m.server = r.serverConfig(m)
	}
	return m, nil
}

// loadPair parses a certificate and its key, and refuses a certificate
// that is not valid now.
func (r *Reloader) loadPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	certErr := func(err error) error { return &FileError{Role: Cert, Path: r.o.CertFile, Err: err} }
	block := pemCertificate(certPEM)
	if block == nil {
		return nil, certErr(errors.New("no PEM certificate in it"))
	}
	if _, err := x509.ParseCertificate(block); err != nil {
		return nil, certErr(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Role: Key, Path: r.o.KeyFile, Err: err}
	}
	now := r.o.Now()
	switch leaf := pair.Leaf; {
	case now.Before(leaf.NotBefore):
		return nil, certErr(fmt.Errorf("not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339)))
	case now.After(leaf.NotAfter):
		return nil, certErr(fmt.Errorf("expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339)))
	}
	return &pair, nil
}

// use makes m the material of new handshakes.
func (r *Reloader) use(m *material) {
	r.cur.Store(m)
	if m.cert != nil {
		r.o.Metrics.certificateExpires(r.o.Name, m.cert.Leaf.NotAfter)
	}
}

// notAfter is when m's certificate expires, for a log line.
func notAfter(m *material) string {
	if m.cert == nil {
		return ""
	}
	return m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339)
}
