package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"syscall"

	"google.golang.org/grpc/credentials"
)

// The reasons a handshake fails: the reason label of
// throttle_tls_handshake_failures_total.
const (
	ReasonNoCertificate = "no_certificate"  // the client sent none
	ReasonUnknownCA     = "unknown_ca"      // it does not chain to the CA bundle
	ReasonExpired       = "expired"         // expired, or not valid yet
	ReasonSANNotAllowed = "san_not_allowed" // none of its SANs is allowed
	ReasonOther         = "other"           // any other failed handshake
)

var reasons = []string{ReasonNoCertificate, ReasonUnknownCA, ReasonExpired, ReasonSANNotAllowed, ReasonOther}

// RefusedError is a client certificate that verifyClient refused.
type RefusedError struct {
	Reason string
	Err    error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("tls: client certificate refused (%s): %v", e.Reason, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// verifyClient is a listener's check of a client certificate: it must
// chain to pool (the CA bundle the handshake began with) for client
// authentication, then carry one of AllowedSANs when there are any. A
// refusal is counted by reason, and logged at debug level with what the
// certificate names.
func (r *Reloader) verifyClient(pool *x509.CertPool, cs tls.ConnectionState) error {
	reason, err := checkClient(pool, r.o.AllowedSANs, cs, r.o)
	if err == nil {
		return nil
	}
	r.o.Metrics.handshakeFailed(r.o.Name, reason)
	r.o.Log.Debug("TLS client certificate refused", "tls", r.o.Name, "reason", reason, "err", err)
	return &RefusedError{Reason: reason, Err: err}
}

// CheckClient checks the client certificate of cs, a connection another
// listener accepted, as this listener's handshakes check theirs: it must
// chain to the CA bundle loaded last and carry one of AllowedSANs when
// there are any. A route of that other listener that must ask what this
// one asks (POST /json on the REST port, as gRPC asks) calls it; cs nil
// (plain HTTP), a connection without a certificate, or a Reloader without
// a CA bundle is refused. The error says why (a *RefusedError); nothing is
// counted, as no handshake failed.
func (r *Reloader) CheckClient(cs *tls.ConnectionState) error {
	pool := r.cur.Load().pool
	switch {
	case pool == nil:
		return &RefusedError{Reason: ReasonOther, Err: errors.New("no CA bundle to check client certificates against")}
	case cs == nil:
		return &RefusedError{Reason: ReasonNoCertificate, Err: errors.New("no TLS, so no client certificate")}
	}
	if reason, err := checkClient(pool, r.o.AllowedSANs, *cs, r.o); err != nil {
		return &RefusedError{Reason: reason, Err: err}
	}
	return nil
}

func checkClient(pool *x509.CertPool, allowList []string, cs tls.ConnectionState, o Options) (reason string, err error) {
	if len(cs.PeerCertificates) == 0 {
		return ReasonNoCertificate, errors.New("no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{
		Roots: pool, CurrentTime: o.Now(), Intermediates: x509.NewCertPool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		switch {
		case errors.As(err, &unknown):
			return ReasonUnknownCA, fmt.Errorf("%s: %w", describe(leaf), err)
		case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
			return ReasonExpired, fmt.Errorf("%s: %w", describe(leaf), err)
		}
		return ReasonOther, fmt.Errorf("%s: %w", describe(leaf), err)
	}
	if len(allowList) > 0 && !allowed(leaf, allowList) {
		return ReasonSANNotAllowed, fmt.Errorf("%s: none of the SANs is allowed", describe(leaf))
	}
	return "", nil
}

// handshakeFailed counts a failed handshake of a listener that
// verifyClient did not count already (it refused a certificate), unless
// the client went away before saying anything (a TCP probe).
func (r *Reloader) handshakeFailed(err error) {
	var refused *RefusedError
	if errors.As(err, &refused) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
		return
	}
	r.o.Metrics.handshakeFailed(r.o.Name, ReasonOther)
	r.o.Log.Debug("TLS handshake failed", "tls", r.o.Name, "err", err)
}

// GRPCCredentials are the transport credentials of a gRPC server serving
// ServerConfig; every failed handshake is counted.
func (r *Reloader) GRPCCredentials() credentials.TransportCredentials {
	return &countingCreds{TransportCredentials: credentials.NewTLS(r.ServerConfig()), r: r}
}

type countingCreds struct {
	credentials.TransportCredentials
	r *Reloader
}

func (c *countingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.r.handshakeFailed(err)
	}
	return out, info, err
}

func (c *countingCreds) Clone() credentials.TransportCredentials {
	return &countingCreds{TransportCredentials: c.TransportCredentials.Clone(), r: c.r}
}

// HTTPErrorLog is an http.Server's ErrorLog for a listener serving
// ServerConfig: net/http reports a failed handshake only there, as a line
// "http: TLS handshake error from ADDR: ERR". Those are counted (as
// handshakeFailed does) and logged at debug level; other lines go to log
// as warnings.
func (r *Reloader) HTTPErrorLog(to *slog.Logger) *log.Logger {
	return log.New(&httpErrorWriter{r: r, log: to}, "", 0)
}

type httpErrorWriter struct {
	r   *Reloader
	log *slog.Logger
}

func (w *httpErrorWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if _, detail, ok := strings.Cut(line, "TLS handshake error from "); ok {
		_, msg, _ := strings.Cut(detail, ": ")
		if !strings.Contains(msg, "client certificate refused") && !strings.HasSuffix(msg, "EOF") && !strings.Contains(msg, "connection reset") {
			w.r.o.Metrics.handshakeFailed(w.r.o.Name, ReasonOther)
		}
		w.log.Debug("TLS handshake failed", "tls", w.r.o.Name, "detail", detail)
		return len(p), nil
	}
	w.log.Warn("http server", "detail", line)
	return len(p), nil
}
