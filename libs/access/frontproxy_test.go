package access

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func trustWith(t *testing.T, data map[string]string) *FrontProxy {
	t.Helper()
	tr, err := parseFrontProxy(data)
	if err != nil {
		t.Fatal(err)
	}
	f := &FrontProxy{}
	f.trust.Store(tr)
	return f
}

// caPEM is a self-signed CA certificate (the pool is used by the TLS handshake, not by User).
func caPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestFrontProxyBelievesHeadersOnlyFromAnAllowedCertificate(t *testing.T) {
	f := trustWith(t, map[string]string{
		"requestheader-client-ca-file":       caPEM(t),
		"requestheader-allowed-names":        `["front-proxy-client"]`,
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
	})
	r := httptest.NewRequest("GET", "/apis", nil)
	r.Header.Set("X-Remote-User", "alice")
	r.Header.Add("X-Remote-Group", "devs")
	r.Header.Add("X-Remote-Group", "system:authenticated")
	r.Header.Set("X-Remote-Extra-Scopes", "a")
	r.Header.Set("X-Remote-Extra-Example.com%2fteam", "blue")
	if _, err := f.User(r); err == nil || !strings.Contains(err.Error(), "API server only") {
		t.Fatalf("no TLS: %v, want a refusal", err)
	}
	r.TLS = &tls.ConnectionState{}
	if _, err := f.User(r); err == nil {
		t.Fatal("TLS without a verified client certificate was believed")
	}
	r.TLS.VerifiedChains = [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "someone-else"}}}}
	if _, err := f.User(r); err == nil || !strings.Contains(err.Error(), "requestheader-allowed-names") {
		t.Fatalf("another name: %v, want a refusal naming requestheader-allowed-names", err)
	}
	r.TLS.VerifiedChains = [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "front-proxy-client"}}}}
	u, err := f.User(r)
	if err != nil {
		t.Fatal(err)
	}
	if u.Username != "alice" || strings.Join(u.Groups, ",") != "devs,system:authenticated" ||
		strings.Join(u.Extra["scopes"], ",") != "a" || strings.Join(u.Extra["example.com/team"], ",") != "blue" {
		t.Fatalf("user = %+v", u)
	}
	r.Header.Del("X-Remote-User")
	if _, err := f.User(r); err == nil || !strings.Contains(err.Error(), "named no user") {
		t.Fatalf("no user header: %v", err)
	}
}

func TestFrontProxyTrustNeedsACAAndAUserHeader(t *testing.T) {
	if _, err := parseFrontProxy(map[string]string{}); err == nil || !strings.Contains(err.Error(), "--requestheader-client-ca-file") {
		t.Errorf("no CA: %v", err)
	}
	if _, err := parseFrontProxy(map[string]string{"requestheader-client-ca-file": "not pem"}); err == nil || !strings.Contains(err.Error(), "no PEM") {
		t.Errorf("bad CA: %v", err)
	}
	if _, err := parseFrontProxy(map[string]string{"requestheader-client-ca-file": caPEM(t)}); err == nil || !strings.Contains(err.Error(), "--requestheader-username-headers") {
		t.Errorf("no user header: %v", err)
	}
}
