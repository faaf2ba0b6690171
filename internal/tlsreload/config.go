package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ServerConfig is the TLS configuration of a listener: each handshake takes
// the material loaded last (GetConfigForClient), so a rotated certificate
// or CA bundle serves new connections while open ones carry on. TLS 1.2 at
// least. With a CA bundle, clients must present a certificate it signed
// (and, with AllowedSANs, carrying one of them); see verifyClient.
func (r *Reloader) ServerConfig() *tls.Config {
	r.o.Metrics.listen(r.o.Name)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: r.o.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.cur.Load()
			if m.server == nil {
				return nil, errors.New("tlsreload: no certificate to serve")
			}
			return m.server, nil
		},
	}
}

// serverConfig is the configuration of the handshakes that m serves.
// Client certificates are asked for (the bundle's CAs named in the
// request) but verified by verifyClient, so that every refusal is counted
// with its reason, and the verification always uses the bundle of the
// moment, for resumed sessions too.
func (r *Reloader) serverConfig(m *material) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   r.o.NextProtos,
		Certificates: []tls.Certificate{*m.cert},
	}
	if m.pool != nil {
		c.ClientAuth = tls.RequestClientCert
		c.ClientCAs = m.pool
		pool := m.pool
		c.VerifyConnection = func(cs tls.ConnectionState) error { return r.verifyClient(pool, cs) }
	}
	return c
}

// ClientConfig is the TLS configuration of a client of a server named
// serverName (a host name or an IP address): its certificate is verified
// against the CA bundle loaded last (the system's roots without CAFile)
// and, unless skipHostname, must name serverName. The client certificate,
// if any, is the one loaded last. TLS 1.2 at least.
//
// The configuration is one value shared by every connection of the client
// (and copied by clients made from its options): the verification is done
// in VerifyConnection, reading the current material, instead of through
// RootCAs, which could only change with a new configuration.
func (r *Reloader) ClientConfig(serverName string, skipHostname bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// Verified by VerifyConnection below, against the CA bundle of
		// the moment; crypto/tls's own verification would use RootCAs.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			name := serverName
			if skipHostname {
				name = ""
			}
			return verifyServer(r.cur.Load().pool, name, cs, r.o.Now())
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := r.cur.Load().cert; c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
}

// verifyServer checks a server's certificate chain against pool (nil: the
// system's roots) and, unless name is empty, that it names name.
func verifyServer(pool *x509.CertPool, name string, cs tls.ConnectionState, now time.Time) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// pemCertificate returns the DER bytes of the first CERTIFICATE block of
// data, or nil.
func pemCertificate(data []byte) []byte {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil
		}
		if block.Type == "CERTIFICATE" {
			return block.Bytes
		}
	}
}

// sans are the DNS and URI SANs of c, for matching and for messages.
func sans(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

// allowed reports whether c carries one of the SANs of list.
func allowed(c *x509.Certificate, list []string) bool {
	for _, s := range sans(c) {
		if slices.Contains(list, s) {
			return true
		}
	}
	return false
}

// describe names c for a log line: its subject and SANs.
func describe(c *x509.Certificate) string {
	return fmt.Sprintf("subject %q, SANs %v", c.Subject.String(), sans(c))
}
