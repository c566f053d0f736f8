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
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// FrontProxyClientName is the common name of the client certificate the test API server presents
// to aggregated API servers (its only --requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// FrontProxy is the test API server's front-proxy trust, as a cluster's is: a CA of its own that
// signs the client certificate the API server presents when it proxies a request to an
// aggregated API server (with the user in X-Remote-User, X-Remote-Group, X-Remote-Extra-*).
type FrontProxy struct {
	CAFile, CertFile, KeyFile string

	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial atomic.Int64
}

func newFrontProxy(dir string) (*FrontProxy, error) {
	f := &FrontProxy{}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "agentplane-testenv-front-proxy-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := f.sign(tmpl, &key.PublicKey, tmpl, key)
	if err != nil {
		return nil, err
	}
	if f.ca, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	f.caKey = key
	f.CAFile = filepath.Join(dir, "front-proxy-ca.crt")
	if err := os.WriteFile(f.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	c, err := f.Client(FrontProxyClientName)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, err
	}
	f.CertFile, f.KeyFile = filepath.Join(dir, "front-proxy-client.crt"), filepath.Join(dir, "front-proxy-client.key")
	if err := os.WriteFile(f.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600); err != nil {
		return nil, err
	}
	return f, os.WriteFile(f.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

// Client returns a client certificate with common name cn signed by the front-proxy CA: with
// FrontProxyClientName it is the API server's own; with another name, one the CA signed for
// something else, which an aggregated API server must refuse.
func (f *FrontProxy) Client(cn string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := f.sign(&x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, &key.PublicKey, f.ca, f.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func (f *FrontProxy) sign(tmpl *x509.Certificate, pub *ecdsa.PublicKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) ([]byte, error) {
	tmpl.SerialNumber = big.NewInt(f.serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour)
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
}
