package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// PKI is a throw-away certificate authority with a server certificate for 127.0.0.1 and
// localhost, for TLS and mTLS tests. Files are PEM, in a test temporary directory.
type PKI struct {
	CAPool                    *x509.CertPool
	CAFile, CertFile, KeyFile string

	t      testing.TB
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewPKI makes a CA named name and a server certificate signed by it.
func NewPKI(t testing.TB, name string) *PKI {
	t.Helper()
	p := &PKI{t: t, dir: t.TempDir(), CAPool: x509.NewCertPool()}
	key := p.newKey()
	var der []byte
	p.ca, der = p.issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, key, true)
	p.caKey = key
	p.CAPool.AddCert(p.ca)
	p.CAFile = p.write("ca.crt", "CERTIFICATE", der)
	sk := p.newKey()
	_, sDER := p.issue(&x509.Certificate{Subject: pkix.Name{CommonName: name + " server"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, sk, false)
	p.CertFile = p.write("tls.crt", "CERTIFICATE", sDER)
	p.KeyFile = p.writeKey("tls.key", sk)
	return p
}

// ServerFiles writes a server certificate for dnsNames, signed by the CA, and its key, and returns
// their paths (the aggregated API's: NAME.NAMESPACE.svc, which the API server dials).
func (p *PKI) ServerFiles(dnsNames ...string) (certFile, keyFile string) {
	p.t.Helper()
	k := p.newKey()
	_, der := p.issue(&x509.Certificate{Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, k, false)
	base := "server-" + big.NewInt(p.serial).String()
	return p.write(base+".crt", "CERTIFICATE", der), p.writeKey(base+".key", k)
}

// Client returns a client certificate with common name cn, signed by the CA.
func (p *PKI) Client(cn string) tls.Certificate {
	p.t.Helper()
	k := p.newKey()
	_, der := p.issue(&x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, k, false)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// ClientFiles writes a client certificate for cn and its key, and returns their paths.
func (p *PKI) ClientFiles(cn string) (certFile, keyFile string) {
	p.t.Helper()
	c := p.Client(cn)
	p.serial++
	base := "client-" + big.NewInt(p.serial).String()
	return p.write(base+".crt", "CERTIFICATE", c.Certificate[0]), p.writeKey(base+".key", c.PrivateKey.(*ecdsa.PrivateKey))
}

func (p *PKI) newKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	return k
}

func (p *PKI) issue(tmpl *x509.Certificate, key *ecdsa.PrivateKey, self bool) (*x509.Certificate, []byte) {
	p.serial++
	tmpl.SerialNumber = big.NewInt(p.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	parent, parentKey := p.ca, p.caKey
	if self {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		p.t.Fatal(err)
	}
	return c, der
}

func (p *PKI) writeKey(name string, k *ecdsa.PrivateKey) string {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(name, "EC PRIVATE KEY", der)
}

func (p *PKI) write(name, typ string, der []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// TLSRefusal reports whether err is a server refusing the client's certificate during the TLS
// handshake (TLS 1.3 "certificate required", "bad certificate", or "unknown certificate
// authority"), not some other failure such as a refused connection.
func TLSRefusal(err error) bool {
	if err == nil {
		return false
	}
	for _, alert := range []string{"certificate required", "bad certificate", "unknown certificate authority"} {
		if strings.Contains(err.Error(), alert) {
			return true
		}
	}
	return false
}

// TLSAlert opens a plain TLS connection to addr with cfg and reads from it, returning the error
// the server's side of the handshake ends with (TLS 1.3 sends a refusal of the client's
// certificate after the client's side of the handshake, so it arrives on the first read). A gRPC
// client retries and may report only a later broken pipe; this reads the alert itself.
func TLSAlert(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}
