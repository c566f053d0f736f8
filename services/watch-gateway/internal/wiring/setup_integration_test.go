//go:build integration

package wiring

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/testenv"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

var env *testenv.Kube

func TestMain(m *testing.M) {
	os.Exit(testenv.NoLeaks(func() int {
		var err error
		if env, err = testenv.StartKube(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer env.Stop()
		return m.Run()
	}()))
}

// pki is a throw-away CA with a server certificate for 127.0.0.1 and a client certificate.
type pki struct {
	caPool                    *x509.CertPool
	client, stranger          tls.Certificate // signed by the CA, and by another CA
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	ca := testenv.NewPKI(t, "agentplane test CA")
	return pki{caPool: ca.CAPool, client: ca.Client("operator"), stranger: testenv.NewPKI(t, "some other CA").Client("operator"),
		caFile: ca.CAFile, certFile: ca.CertFile, keyFile: ca.KeyFile}
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
		done <- nil // the cleanup above waits for the service: it has stopped
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
		if !testenv.TLSRefusal(err) {
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
	alert := func(cert *tls.Certificate) error { return testenv.TLSAlert(grpcAddr, clientTLS(cert)) }
	for name, cert := range map[string]*tls.Certificate{"no client certificate": nil, "another CA's certificate": &p.stranger} {
		if err := alert(cert); err == nil || !testenv.TLSRefusal(err) {
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

// TestTheServedHTTPKeepsToItsHostsAndBoundsRequests (#31 items 7 and 8), on the real service: a
// request naming another host is refused (421), one naming an allowed name or an IP address is
// served; a request whose headers are too large is refused.
func TestTheServedHTTPKeepsToItsHostsAndBoundsRequests(t *testing.T) {
	_, url := run(t, map[string]string{"JANGAR_WATCH_AUTH_MODE": "none", "JANGAR_CONSOLE_ENABLED": "false",
		"JANGAR_HTTP_ALLOWED_HOSTS": "localhost,gateway.example"})
	url = strings.Replace(url, "https://", "http://", 1)
	get := func(host string, header http.Header) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range header {
			req.Header[k] = v
		}
		return (&http.Client{Timeout: 10 * time.Second}).Do(req)
	}
	for host, want := range map[string]int{"evil.example": http.StatusMisdirectedRequest, "gateway.example:8080": http.StatusOK, "localhost": http.StatusOK, "": http.StatusOK} {
		resp, err := get(host, nil)
		if err != nil {
			t.Fatalf("Host %q: %v", host, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
	huge := http.Header{"X-Junk": {strings.Repeat("x", 100<<10)}}
	if resp, err := get("localhost", huge); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("100 KiB of headers: %d, want 431", resp.StatusCode)
		}
	}
}

// TestTokenModeTakesOnlyTokensForTheGatewaysAudience (#31 item 4), on the real service with its
// default configuration: a token of the API server's own audience (what a kubeconfig or a pod's
// mounted token holds) is refused, on gRPC and HTTP, with a message naming the audience to ask
// for; a token issued for agentplane-gateway, of the same user, is served.
func TestTokenModeTakesOnlyTokensForTheGatewaysAudience(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "audience-viewer", Namespace: "default"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"agents.proompteng.ai"}, Resources: []string{"controlplane/status"}, Verbs: []string{"get", "watch"}}}}
	if _, err := env.Client.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "audience-viewer", Namespace: "default"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "audience-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "audience-viewer", Namespace: "default"}}}
	if _, err := env.Client.RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiServerToken, err := env.ServiceAccountToken(ctx, "default", "audience-viewer")
	if err != nil {
		t.Fatal(err)
	}
	gatewayToken, err := env.ServiceAccountToken(ctx, "default", "audience-viewer", "agentplane-gateway")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, url := run(t, map[string]string{"JANGAR_WATCH_AUTH_MODE": "token", "JANGAR_CONSOLE_ENABLED": "false"})
	url = strings.Replace(url, "https://", "http://", 1)
	conn, err := grpcx.Dial(grpcAddr, grpcx.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	get := func(token string) error {
		c, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 10*time.Second)
		defer cancel()
		_, err := jangarv1.NewAgentctlServiceClient(conn).GetControlPlaneStatus(c, &jangarv1.GetControlPlaneStatusRequest{})
		return err
	}
	sse := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		return resp.StatusCode, ""
	}

	err = get(apiServerToken)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "--audience agentplane-gateway") {
		t.Errorf("gRPC with the API server's audience: %v, want Unauthenticated naming --audience agentplane-gateway", err)
	}
	if code, body := sse(apiServerToken); code != http.StatusUnauthorized || !strings.Contains(body, "--audience agentplane-gateway") {
		t.Errorf("SSE with the API server's audience: %d %q, want 401 naming --audience agentplane-gateway", code, body)
	}
	if err := get(gatewayToken); err != nil {
		t.Errorf("gRPC with a token for agentplane-gateway: %v", err)
	}
	if code, body := sse(gatewayToken); code != http.StatusOK {
		t.Errorf("SSE with a token for agentplane-gateway: %d %s", code, body)
	}
}
