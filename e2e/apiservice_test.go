package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/testenv"
)

// execKubeconfig writes a kubeconfig for the API server of kube whose user authenticates with an
// exec credential plugin (as EKS's, GKE's and AKS's do) that hands out token: a credential the
// gateway itself would refuse (the API server's audience), which only the API server sees.
func execKubeconfig(t *testing.T, kube *testenv.Kube, namespace, token string) string {
	t.Helper()
	dir := t.TempDir()
	cred := filepath.Join(dir, "credential.json")
	if err := os.WriteFile(cred, fmt.Appendf(nil, `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":%q}}`, token), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, kube.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: plugin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/cat
      args: [%q]
      interactiveMode: Never
contexts:
- name: test
  context: {cluster: test, user: plugin, namespace: %s}
current-context: test
`, kube.Config.Host, ca, cred, namespace), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestTheGatewaysAggregatedAPIServesKubeconfigUsers (#31 item 3) installs the watch-gateway chart
// with apiService.enabled on a real API server, runs the binary as the chart's ServiceAccount
// with the certificate the chart generated, and reads the status with agentctl and kubectl as a
// user whose kubeconfig authenticates with an exec plugin: the API server authenticates the user,
// the chart's APIService (its caBundle) and RoleBindings are all the gateway needs, the
// status-viewer Role is all the user needs, and agentctl takes this path by default.
func TestTheGatewaysAggregatedAPIServesKubeconfigUsers(t *testing.T) {
	const cp = "agentplane"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube, kubectl := chartOnAPIServer(t, "watch-gateway", cp, []string{cp}, "--set", "apiService.enabled=true")
	asSA := impersonating(t, kube.Kubeconfig, "system:serviceaccount:"+cp+":watch-gateway")
	dir := t.TempDir()
	for _, key := range []string{"tls.crt", "tls.key"} {
		b64, err := kubectl("-n", cp, "get", "secret", "watch-gateway-tls", "-o", "jsonpath={.data."+strings.ReplaceAll(key, ".", `\.`)+"}")
		if err != nil {
			t.Fatalf("the chart's generated certificate: %v %s", err, b64)
		}
		pem, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, key), pem, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ip, err := testenv.HostIP()
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = testenv.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(binPath(t, "watch-gateway"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+asSA, "POD_NAMESPACE="+cp, "JANGAR_WATCH_AUTH_MODE=token",
		"JANGAR_GRPC_PORT="+strconv.Itoa(ports[0]), "JANGAR_METRICS_ADDR=127.0.0.1:0", fmt.Sprintf("JANGAR_HTTP_ADDR=127.0.0.1:%d", ports[1]),
		"JANGAR_WATCH_TLS_CERT_FILE="+filepath.Join(dir, "tls.crt"), "JANGAR_WATCH_TLS_KEY_FILE="+filepath.Join(dir, "tls.key"),
		fmt.Sprintf("JANGAR_APISERVICE_ADDR=%s:%d", ip, ports[2]))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The Service's endpoints, as the endpoints controller would write them for the pod.
	if err := kube.EndpointSlice(ctx, cp, "watch-gateway", "apiservice", ip, ports[2]); err != nil {
		t.Fatal(err)
	}
	if err := kube.WaitAPIService(ctx, "v1alpha1.gateway.agents.proompteng.ai"); err != nil {
		t.Fatalf("%v\ngateway: %s", err, stderr.String())
	}

	token := func(sa string) string {
		if out, err := kubectl("-n", cp, "create", "serviceaccount", sa); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		tok, err := kubectl("-n", cp, "create", "token", sa) // the API server's audience
		if err != nil {
			t.Fatalf("%v %s", err, tok)
		}
		return strings.TrimSpace(tok)
	}
	viewer := execKubeconfig(t, kube, cp, token("viewer"))
	stranger := execKubeconfig(t, kube, cp, token("stranger"))
	if out, err := kubectl("-n", cp, "create", "rolebinding", "viewer-status", "--role", "watch-gateway-status-viewer", "--serviceaccount", cp+":viewer"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	agentctl := binPath(t, "agentctl")

	t.Run("agentctl reads the status through the API server by default", func(t *testing.T) {
		out, err := run(ctx, t, nil, agentctl, "--kubeconfig", viewer, "status", "--transport", "grpc", "-o", "ndjson", "--exit-code=false", "--debug")
		if err != nil || !strings.Contains(out, "transport=api") || !strings.Contains(out, `"component":"kube-apiserver"`) {
			t.Fatalf("agentctl status: %v\n%s\ngateway: %s", err, out, stderr.String())
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", viewer, "status", "watch", "--transport", "api", "-o", "ndjson", "--heartbeat", "1s", "--timeout", "4s")
		if err != nil || !strings.Contains(out, `"type":"snapshot"`) || !strings.Contains(out, `"type":"heartbeat"`) {
			t.Fatalf("agentctl status watch: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", viewer, "status", "history")
		if exitCode(err) != 5 || !strings.Contains(out, "keeps no status history") {
			t.Fatalf("agentctl status history without Redis: exit %d, want 5 saying there is none:\n%s", exitCode(err), out)
		}
	})
	t.Run("the command NOTES prints reads it with kubectl", func(t *testing.T) {
		out, err := run(ctx, t, nil, kube.Kubectl, "--kubeconfig", viewer, "get", "--raw", "/apis/gateway.agents.proompteng.ai/v1alpha1/namespaces/"+cp+"/controlplanestatus")
		if err != nil || !strings.Contains(out, `"type":"snapshot"`) {
			t.Fatalf("kubectl get --raw: %v\n%s", err, out)
		}
	})
	t.Run("a user without the status-viewer Role is refused, saying so", func(t *testing.T) {
		out, err := run(ctx, t, nil, agentctl, "--kubeconfig", stranger, "status", "--transport", "api")
		if exitCode(err) != 4 || !strings.Contains(out, "forbidden") {
			t.Fatalf("agentctl status as a user without the Role: exit %d, want 4 (access):\n%s", exitCode(err), out)
		}
	})
	if strings.Contains(stderr.String(), "forbidden") {
		t.Errorf("the gateway was refused something it needs (the chart's RBAC is not enough):\n%s", stderr.String())
	}
}
