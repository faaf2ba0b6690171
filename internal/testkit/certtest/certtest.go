// Package certtest makes certificate authorities, certificates and keys
// for tests (crypto/x509, ECDSA P-256), as PEM files in temp folders.
package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of a test.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
	// PEM is the CA's certificate in PEM, a bundle of one.
	PEM []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName defaults to the first DNS name.
	CommonName string
	DNS        []string
	IPs        []string
	URIs       []string // such as spiffe://cluster.local/ns/gw/sa/envoy
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Pair is an issued certificate and its key, in PEM.
type Pair struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// TLS is the pair as crypto/tls takes it.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue makes a certificate signed by ca, for both server and client
// authentication.
func (ca *CA) Issue(t testing.TB, l Leaf) Pair {
	t.Helper()
	key := newKey(t)
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	if l.CommonName == "" && len(l.DNS) > 0 {
		l.CommonName = l.DNS[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: l.CommonName},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		DNSNames:     l.DNS,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, ip := range l.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range l.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Localhost is a server certificate for 127.0.0.1 and localhost.
func (ca *CA) Localhost(t testing.TB) Pair {
	t.Helper()
	return ca.Issue(t, Leaf{DNS: []string{"localhost"}, IPs: []string{"127.0.0.1"}})
}

// Files are the paths of a pair and its CA written to a folder.
type Files struct {
	Cert, Key, CA string
}

// Write writes the pair and ca's bundle to dir as cert.pem, key.pem and
// ca.pem (the folder is made if missing) and returns their paths.
func (p Pair) Write(t testing.TB, dir string, ca *CA) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), CA: filepath.Join(dir, "ca.pem")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{f.Cert: p.CertPEM, f.Key: p.KeyPEM, f.CA: ca.PEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// ClientTLS is a client configuration trusting ca for a server named
// serverName, presenting client (nil: no certificate) whatever CAs the
// server names (as Envoy does; Go's default would send none that another
// CA signed).
func ClientTLS(t testing.TB, ca *CA, serverName string, client *Pair) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if client != nil {
		cert := client.TLS(t)
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return c
}

func newKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
