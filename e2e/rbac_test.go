//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentplane/agentplane/libs/access"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// TestStatusWriterChartRBACIsEnoughAndNoMore installs the status-writer chart's RBAC on a real
// API server and runs the status-writer binary as its ServiceAccount (impersonated), with the
// chart's caller authentication: for an allowed controller's token it can write the status of a
// run in the namespace it is given (reviewing the token with the chart's grant), and nothing
// else: not a run elsewhere, not a run's spec, not for another ServiceAccount's token.
func TestStatusWriterChartRBACIsEnoughAndNoMore(t *testing.T) {
	root := repoRoot(t)
	kube, kubectl := chartOnAPIServer(t, "status-writer", "granted", []string{"granted", "elsewhere"}, "--set", "controller.namespaces={granted}")
	ctx := context.Background()
	for _, ns := range []string{"granted", "elsewhere"} {
		if out, err := kubectl("apply", "-n", ns, "-f", filepath.Join(root, "examples", "agentrun.yaml")); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}

	// A kubeconfig that acts as the chart's ServiceAccount.
	const sa = "system:serviceaccount:granted:status-writer"
	asSA := impersonating(t, kube.Kubeconfig, sa)
	if out, err := kubectl("--as", sa, "-n", "granted", "patch", "agentrun", "hello", "--type=merge", "-p", `{"spec":{"parameters":{"x":"y"}}}`); err == nil || !strings.Contains(out, "forbidden") {
		t.Fatalf("the ServiceAccount may edit a run's spec: %v %s", err, out)
	}

	grpcPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Callers authenticated as the chart configures it (auth.mode=token, the controllers
	// allowed): the TokenReviews go through the chart's ClusterRole.
	cmd := exec.Command(binPath(t, "status-writer"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+asSA, "JANGAR_GRPC_PORT="+strconv.Itoa(grpcPort),
		fmt.Sprintf("JANGAR_METRICS_ADDR=127.0.0.1:%d", metricsPort), "POD_NAMESPACE=granted",
		"JANGAR_GRPC_AUTH_MODE="+envOfChart(t, "status-writer", "JANGAR_GRPC_AUTH_MODE"),
		"JANGAR_GRPC_AUTH_ALLOWED_CALLERS="+envOfChart(t, "status-writer", "JANGAR_GRPC_AUTH_ALLOWED_CALLERS"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	writer := func(sa string) *statusclient.Client {
		dial := callerDial(t, kube, "granted", sa)
		sw, err := statusclient.New(fmt.Sprintf("127.0.0.1:%d", grpcPort), "rbac-test", statusclient.Options{RetryFor: 20 * time.Second, Dial: dial})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sw.Close() })
		return sw
	}
	sw := writer("run-controller")
	write := func(ns string) error {
		_, err := sw.Write(ctx, &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "AgentRun", Namespace: ns, Name: "hello"}, ObservedGeneration: 1, Phase: "Running"})
		return err
	}
	if err := write("granted"); err != nil {
		t.Fatalf("write in the granted namespace: %v", err)
	}
	if _, err := writer("status-writer").Write(ctx, &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "AgentRun", Namespace: "granted", Name: "hello"}, ObservedGeneration: 1, Phase: "Failed"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a ServiceAccount that is not a controller: %v, want PermissionDenied", err)
	}
	if out, _ := kubectl("-n", "granted", "get", "agentrun", "hello", "-o", "jsonpath={.status.phase}"); out != "Running" {
		t.Fatalf("phase = %q", out)
	}
	if err := write("elsewhere"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("write outside the granted namespace: %v, want PermissionDenied", err)
	}
}

// TestWatchGatewayChartRBACServesTokenAccess installs the watch-gateway chart (auth.mode=token,
// its default) on a real API server and runs the binary as the chart's ServiceAccount: with only
// the chart's RBAC it reads what it reports on, reviews callers' tokens, refuses a token whose
// user is not bound to the chart's status-viewer Role and streams to one that is, and serves the
// console (sign-in, the runs stream, a run's page, Cancel) to a user bound to console-operator;
// with the control plane and the runs in one namespace, and with the runs apart
// (controller.namespaces naming another), where the status is the control plane's and the runs
// the other namespace's. The gateway logs no refusal of its own requests.
func TestWatchGatewayChartRBACServesTokenAccess(t *testing.T) {
	t.Run("one namespace", func(t *testing.T) { gatewayServesTokenAccess(t, "granted", "granted") })
	t.Run("runs apart", func(t *testing.T) { gatewayServesTokenAccess(t, "granted", "granted-runs") })
}

func gatewayServesTokenAccess(t *testing.T, cp, runsNS string) {
	namespaces, flags := []string{cp}, []string(nil)
	if runsNS != cp {
		namespaces, flags = append(namespaces, runsNS), []string{"--set", "controller.namespaces={" + runsNS + "}"}
	}
	kube, kubectl := chartOnAPIServer(t, "watch-gateway", cp, namespaces, flags...)
	asSA := impersonating(t, kube.Kubeconfig, "system:serviceaccount:"+cp+":watch-gateway")

	grpcPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath(t, "watch-gateway"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+asSA, "POD_NAMESPACE="+cp, "JANGAR_AGENTS_CONTROLLER_NAMESPACES="+runsNS, "JANGAR_WATCH_AUTH_MODE=token",
		"JANGAR_GRPC_PORT="+strconv.Itoa(grpcPort), "JANGAR_METRICS_ADDR=127.0.0.1:0",
		fmt.Sprintf("JANGAR_HTTP_ADDR=127.0.0.1:%d", httpPort))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/api/agents/control-plane/status/stream", httpPort)

	if out, err := kubectl("-n", cp, "create", "serviceaccount", "operator"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	token, err := kubectl("-n", cp, "create", "token", "operator", "--audience", "agentplane-gateway")
	if err != nil {
		t.Fatalf("%v %s", err, token)
	}
	token = strings.TrimSpace(token)
	stream := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		client := &http.Client{Timeout: 15 * time.Second}
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := client.Do(req)
			if err != nil {
				if time.Now().After(deadline) {
					t.Fatalf("watch-gateway never answered: %v\n%s", err, stderr.String())
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					return resp.StatusCode, data
				}
			}
			return resp.StatusCode, ""
		}
	}
	if code, body := stream(); code != http.StatusForbidden || !strings.Contains(body, "watch-gateway-status-viewer") && !strings.Contains(body, "controlplane/status") {
		t.Fatalf("unbound token: %d %q, want 403 naming the grant", code, body)
	}
	if out, err := kubectl("-n", cp, "create", "rolebinding", "operator-status", "--role", "watch-gateway-status-viewer",
		"--serviceaccount", cp+":operator"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second) // the gateway caches a refusal for a few seconds
	for {
		code, body := stream()
		if code == http.StatusOK {
			for _, want := range []string{`"component":"namespace","namespace":"` + cp + `","status":"healthy"`, `"component":"crds","namespace":"` + cp + `","status":"healthy"`,
				`"component":"kube-apiserver","namespace":"` + cp + `","status":"healthy"`} {
				if !strings.Contains(body, want) {
					t.Fatalf("snapshot lacks %s (the chart's RBAC is not enough to read it):\n%s", want, body)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bound token: %d %q", code, body)
		}
		time.Sleep(time.Second)
	}

	// agentctl over gRPC: refused without the token (exit code 4), served with it
	// (--gateway-token and --gateway-token-file). --exit-code=false: this gateway reports on an API
	// server without the services, and the point here is access, not health.
	agentctl := binPath(t, "agentctl")
	server := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	gw := exec.Command(agentctl, "status", "--gateway", server, "--timeout", "10s")
	out, err := gw.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bearer token is required") || gw.ProcessState.ExitCode() != 4 {
		t.Fatalf("agentctl without a token: %v (want exit code 4)\n%s", err, out)
	}
	out, err = exec.Command(agentctl, "status", "--gateway", server, "--gateway-token", token, "-o", "json", "--exit-code=false").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"component": "crds"`) && !strings.Contains(string(out), `"component":"crds"`) {
		t.Fatalf("agentctl --gateway-token: %v\n%s", err, out)
	}
	if strings.Contains(string(out), token) {
		t.Fatal("agentctl printed the token")
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(agentctl, "status", "--gateway", server, "--gateway-token-file", tokenFile, "--exit-code=false").CombinedOutput(); err != nil || !strings.Contains(string(out), "crds") {
		t.Fatalf("agentctl --gateway-token-file: %v\n%s", err, out)
	}

	// The console, with only the chart's RBAC for the gateway: a user bound to the chart's
	// console-operator Role signs in, follows the runs stream, reads a run's page (its Jobs and
	// Events) and cancels it.
	if out, err := kubectl("-n", runsNS, "create", "rolebinding", "operator-console", "--role", "watch-gateway-console-operator",
		"--serviceaccount", cp+":operator"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	run := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(run, []byte(agentRunYAML("console-rbac", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("-n", runsNS, "apply", "-f", run); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	signin, _ := http.NewRequest(http.MethodPost, base+"/console/api/session", strings.NewReader(`{"token":"`+token+`"}`))
	signin.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(signin)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var who struct {
		CSRF string `json:"csrf"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &who) != nil || len(resp.Cookies()) != 1 {
		t.Fatalf("console sign-in: %d %s", resp.StatusCode, body)
	}
	cookie := resp.Cookies()[0]
	call := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		req.AddCookie(cookie)
		req.Header.Set("X-CSRF-Token", who.CSRF)
		resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("Content-Type") == "text/event-stream" {
			return resp.StatusCode, ""
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := call(http.MethodGet, "/api/agents/runs/stream"); code != http.StatusOK {
		t.Fatalf("the runs stream for the console operator: %d", code)
	}
	eventually(t, 30*time.Second, "the run's page", func() error {
		code, body := call(http.MethodGet, "/console/api/runs/AgentRun/console-rbac")
		if code != http.StatusOK || !strings.Contains(body, `"can_cancel":true`) || strings.Contains(body, "problems") {
			return errorf("%d %s", code, body)
		}
		return nil
	})
	if code, body := call(http.MethodPost, "/console/api/runs/AgentRun/console-rbac/cancel"); code != http.StatusAccepted {
		t.Fatalf("cancel through the console with the chart's RBAC: %d %s", code, body)
	}
	if out, _ := kubectl("-n", runsNS, "get", "agentrun", "console-rbac", "-o", "jsonpath={.spec.cancel}"); out != "true" {
		t.Fatalf("spec.cancel after the console's cancel: %q", out)
	}
	if strings.Contains(stderr.String(), "forbidden") {
		t.Errorf("the gateway was refused a request of its own with the chart's RBAC:\n%s", stderr.String())
	}
}

// callerDial is how a controller dials agentplane's services: a token of ServiceAccount ns/sa
// issued for the services' audience, read from a file as the charts project it.
func callerDial(t testing.TB, kube *testenv.Kube, ns, sa string) grpcx.ClientOptions {
	t.Helper()
	tok, err := kube.ServiceAccountToken(context.Background(), ns, sa, access.DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	dial, err := access.ClientAuth{TokenFile: file}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	return dial
}

// chartOnAPIServer starts a real API server, creates namespaces and applies what the chart
// renders for a release in namespace (helm template with flags). It returns the server, stopped
// when the test ends, and a kubectl that returns stdout and stderr together.
func chartOnAPIServer(t *testing.T, chart, namespace string, namespaces []string, flags ...string) (*testenv.Kube, func(args ...string) (string, error)) {
	t.Helper()
	root := repoRoot(t)
	helm := mustExist(t, filepath.Join(root, helmPath), "tools")
	kube, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Stop() })
	kubectl := func(args ...string) (string, error) {
		// The admission policy that records a run's creator needs the CRD's published schema; while
		// the API server republishes it (it did, under CI's load, after StartKube had seen it), a
		// create is refused with this transient message. Retried as a user would, for up to 30 s.
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, errOut, err := kube.RunKubectl(context.Background(), args...)
			if err == nil || !strings.Contains(errOut, "There can be a delay between when CustomResourceDefinitions are created") || time.Now().After(deadline) {
				return out + errOut, err
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	for _, ns := range namespaces {
		if out, err := kubectl("create", "namespace", ns); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	args := append([]string{"template", chart, filepath.Join(root, "charts", chart), "-n", namespace, "--kube-version", renderKubeVersion}, withChoices(chart, flags...)...)
	manifest, err := exec.Command(helm, args...).Output()
	if err != nil {
		t.Fatalf("helm template %s: %v", chart, err)
	}
	file := filepath.Join(t.TempDir(), "chart.yaml")
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	// Objects the chart names no namespace for go in the release's; the others (a Role in a
	// namespace of controller.namespaces) in theirs: a kubeconfig whose context says the release's.
	cfg, err := clientcmd.LoadFromFile(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Contexts {
		c.Namespace = namespace
	}
	inRelease := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, inRelease); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kube.Kubectl, "--kubeconfig", inRelease, "apply", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("apply chart %s: %v %s", chart, err, out)
	}
	return kube, kubectl
}

// impersonating writes a copy of kubeconfig that acts as user.
func impersonating(t *testing.T, kubeconfig, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = user
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunControllerChartRBACIsEnoughAndNoMore installs the run-controller chart's RBAC on a real
// API server and runs the binary as its ServiceAccount (impersonated), with leader election on:
// it runs an AgentRun as a Job and an OrchestrationRun's first step as an AgentRun and its Job in
// the namespace it is given, and may not touch anything else.
func TestRunControllerChartRBACIsEnoughAndNoMore(t *testing.T) {
	root := repoRoot(t)
	kube, kubectl := chartOnAPIServer(t, "run-controller", "granted", []string{"granted", "elsewhere"}, "--set", "controller.namespaces={granted}")
	for _, f := range []string{"agent.yaml", "agentrun.yaml", "orchestration.yaml", "orchestrationrun.yaml"} {
		if out, err := kubectl("apply", "-n", "granted", "-f", filepath.Join(root, "examples", f)); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	// status-writer and event-emitter (with their Redis) run as the API server's admin.
	w, err := testenv.StartWriters(kube)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	dir := t.TempDir()
	const sa = "system:serviceaccount:granted:run-controller"
	rc, err := testenv.StartService(binPath(t, "run-controller"), dir, "KUBECONFIG="+impersonating(t, kube.Kubeconfig, sa),
		"POD_NAMESPACE=granted", "POD_NAME=run-controller-0", "JANGAR_AGENTS_CONTROLLER_NAMESPACES=granted",
		"JANGAR_LEADER_ELECTION_ENABLED=true", "JANGAR_AGENT_IMAGE=agentplane/agent:e2e", "JANGAR_STATUS_WRITER_ADDR="+w.StatusAddr, "JANGAR_EVENT_EMITTER_ADDR="+w.EventsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Stop()
	eventually(t, 60*time.Second, "the run's Job, the first step's AgentRun and its Job", func() error {
		out, err := kubectl("-n", "granted", "get", "jobs", "-o", "jsonpath={range .items[*]}{.metadata.labels.agents\\.proompteng\\.ai/agent-run} {end}")
		if err != nil || !strings.Contains(out, "hello ") || !strings.Contains(out, "plan-and-implement-1-plan ") {
			return errorf("jobs: %q %v\n%s", out, err, rc.Log())
		}
		if out, _ := kubectl("-n", "granted", "get", "agentrun", "hello", "-o", "jsonpath={.status.phase}/{.status.jobRef.name}"); !strings.HasPrefix(out, "Pending/hello-") {
			return errorf("hello status %q", out)
		}
		return nil
	})
	if strings.Contains(rc.Log(), "forbidden") {
		t.Errorf("run-controller hit a permission it lacks:\n%s", rc.Log())
	}
	for _, probe := range [][]string{
		{"delete", "jobs", "-n", "granted"}, {"create", "jobs", "-n", "elsewhere"}, {"list", "secrets", "-n", "granted"},
		{"create", "pods", "-n", "granted"}, {"patch", "agentruns.agents.proompteng.ai", "-n", "granted"},
		{"update", "agentruns.agents.proompteng.ai/status", "-n", "granted"}, {"delete", "agentruns.agents.proompteng.ai", "-n", "granted"},
		{"list", "agentruns.agents.proompteng.ai", "-n", "elsewhere"}, {"create", "events", "-n", "granted"},
	} {
		out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa}, probe...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the ServiceAccount may %v: %q", probe, out)
		}
	}
}

// envOfChart renders chart with its defaults and returns the value of its container's variable.
func envOfChart(t *testing.T, chart, name string) string {
	t.Helper()
	v, ok := envOf(t, newHelmEnv(t).template(t, chart), name)
	if !ok {
		t.Fatalf("chart %s sets no %s", chart, name)
	}
	return v
}
