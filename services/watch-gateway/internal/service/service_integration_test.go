//go:build integration

package service

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/testenv"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

var env *testenv.Kube

func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		if env, err = testenv.StartKube(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer env.Stop()
		return m.Run()
	}())
}

// pki is a throw-away CA with a server certificate for 127.0.0.1 and a client certificate.
type pki struct {
	caPool                    *x509.CertPool
	client, stranger          tls.Certificate // signed by the CA, and by another CA
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(0)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, key *ecdsa.PrivateKey) (*x509.Certificate, []byte) {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, der
	}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		k := newKey()
		c, der := issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign}, nil, nil, k)
		return c, k, der
	}
	ca, caKey, caDER := newCA("agentplane test CA")
	p := pki{caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	p.caFile = write("ca.crt", "CERTIFICATE", caDER)

	sk := newKey()
	_, sDER := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "watch-gateway"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey, sk)
	p.certFile = write("tls.crt", "CERTIFICATE", sDER)
	skDER, _ := x509.MarshalECPrivateKey(sk)
	p.keyFile = write("tls.key", "EC PRIVATE KEY", skDER)

	clientCert := func(parent *x509.Certificate, parentKey *ecdsa.PrivateKey) tls.Certificate {
		ck := newKey()
		_, der := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "operator"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			KeyUsage: x509.KeyUsageDigitalSignature}, parent, parentKey, ck)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ck}
	}
	p.client = clientCert(ca, caKey)
	other, otherKey, _ := newCA("some other CA")
	p.stranger = clientCert(other, otherKey)
	return p
}

// run starts the real service (app.Run with this package's Setup) with env and returns its
// gRPC address and HTTP stream URL.
func run(t *testing.T, vars map[string]string) (grpcAddr, streamURL string) {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", port)
	vars["JANGAR_HTTP_ADDR"] = httpAddr
	vars["KUBECONFIG"] = env.Kubeconfig
	vars["JANGAR_GRPC_PORT"] = "0"
	vars["JANGAR_METRICS_ADDR"] = "127.0.0.1:0"
	vars["POD_NAMESPACE"] = "default"
	for k, v := range vars {
		t.Setenv(k, v)
	}
	cfg, err := config.LoadService(config.FromOS(), "watch-gateway", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Options{Config: cfg, Setup: Setup, GRPCServerOptions: GRPCServerOptions,
			Listening: func(g, _ net.Addr) { addrs <- g }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service stopped with %v", err)
		}
	})
	select {
	case a := <-addrs:
		_, port, _ := net.SplitHostPort(a.String())
		return "127.0.0.1:" + port, "https://" + httpAddr + "/api/agents/control-plane/status/stream"
	case err := <-done:
		t.Fatalf("service did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("service did not start in 30s")
	}
	return "", ""
}

func TestMTLSRequiresAClientCertificateSignedByTheCA(t *testing.T) {
	p := newPKI(t)
	grpcAddr, url := run(t, map[string]string{
		"JANGAR_WATCH_AUTH_MODE":          "mtls",
		"JANGAR_WATCH_TLS_CERT_FILE":      p.certFile,
		"JANGAR_WATCH_TLS_KEY_FILE":       p.keyFile,
		"JANGAR_WATCH_TLS_CLIENT_CA_FILE": p.caFile,
		"JANGAR_GRPC_HOST":                "0.0.0.0", // allowed: mtls protects it
	})
	clientTLS := func(cert *tls.Certificate) *tls.Config {
		c := &tls.Config{RootCAs: p.caPool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			// Sent whatever CAs the server names, so another CA's certificate reaches it.
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		return c
	}

	// SSE without a client certificate, or with one from another CA: the handshake refuses it.
	for name, cert := range map[string]*tls.Certificate{"no client certificate": nil, "another CA's certificate": &p.stranger} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(cert)}, Timeout: 10 * time.Second}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("SSE with %s: %d, want a refused handshake", name, resp.StatusCode)
		}
		if !tlsRefusal(err) {
			t.Fatalf("SSE with %s: %v, want the server's TLS alert refusing the client certificate", name, err)
		}
	}
	// With one: the stream starts with a snapshot.
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(&p.client)}}
	resp, err := withCert.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	found := false
	for i := 0; i < 10 && sc.Scan(); i++ {
		if sc.Text() == "event: snapshot" {
			found = true
			break
		}
	}
	if resp.StatusCode != http.StatusOK || !found {
		t.Fatalf("SSE with a client certificate: %d, snapshot %v", resp.StatusCode, found)
	}

	// gRPC: the same.
	call := func(cert *tls.Certificate) error {
		conn, err := grpcx.Dial(grpcAddr, grpcx.ClientOptions{TLS: credentials.NewTLS(clientTLS(cert))})
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = jangarv1.NewAgentctlServiceClient(conn).GetControlPlaneStatus(ctx, &jangarv1.GetControlPlaneStatusRequest{})
		return err
	}
	// The gRPC client retries and may report only a later broken pipe: the refusal itself is
	// read on a plain TLS connection to the gRPC port (TLS 1.3 sends the alert after the
	// client's side of the handshake, so it arrives on the first read).
	alert := func(cert *tls.Certificate) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", grpcAddr, clientTLS(cert))
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	for name, cert := range map[string]*tls.Certificate{"no client certificate": nil, "another CA's certificate": &p.stranger} {
		if err := alert(cert); err == nil || !tlsRefusal(err) {
			t.Fatalf("gRPC port with %s: %v, want the server's TLS alert", name, err)
		}
		if err := call(cert); err == nil {
			t.Fatalf("gRPC with %s was served", name)
		}
	}
	if err := call(&p.client); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
}

// tlsRefusal reports whether err is the server refusing the client's certificate during the
// handshake (TLS 1.3 "certificate required", "bad certificate", or "unknown certificate
// authority"), not some other failure such as a refused connection.
func tlsRefusal(err error) bool {
	msg := err.Error()
	for _, alert := range []string{"certificate required", "bad certificate", "unknown certificate authority"} {
		if strings.Contains(msg, alert) {
			return true
		}
	}
	return false
}
