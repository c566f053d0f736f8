//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// checkRunThreats makes, on the real node, the attacks of docs/security.md that need a running
// release and a real run: a Secret's value or a token-shaped string in a run's spec reaches its
// status and events (redacted by status-writer and event-emitter, and kept out of
// run-controller's log); a signed-in console user without patch rights, or a request without the
// session's CSRF token or from another origin, cancels a run (refused, the run unchanged); one
// user opens more watches than JANGAR_WATCH_MAX_STREAMS_PER_USER (the chart's 100) allows
// (refused with 429 naming the bound, and a freed slot is taken again).
func (c *kcluster) checkRunThreats(t *testing.T) {
	t.Run("a run's Secret and token shapes stay out of its status, events and the controller's log", c.checkRealRunRedaction)
	t.Run("the console refuses a cancel without patch rights, the CSRF token or the same origin", c.checkConsoleCancelRefusals)
	t.Run("one user holds at most the per-user number of watches", c.checkStreamBound)
	t.Run("one pod holds at most 32 health watches of a service", c.checkHealthWatchBound)
	t.Run("agentctl sends the kubeconfig's token to no gateway", c.checkAgentctlKeepsTheKubeconfigToken)
}

// checkAgentctlKeepsTheKubeconfigToken: agentctl, with a kubeconfig whose user is a
// ServiceAccount's API-server token on this cluster, is pointed at a gateway that records every
// call's authorization (a stand-in for any server an attacker gets agentctl to talk to). The
// token reaches it in no call; a --gateway-token does (the recorder works).
func (c *kcluster) checkAgentctlKeepsTheKubeconfigToken(t *testing.T) {
	if out, err := c.kubectl("create", "serviceaccount", "threat-harvest"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Cleanup(func() { _, _ = c.kubectl("delete", "serviceaccount/threat-harvest", "--ignore-not-found") })
	apiToken, err := c.kubectl("create", "token", "threat-harvest")
	if err != nil {
		t.Fatalf("%v %s", err, apiToken)
	}
	apiToken = strings.TrimSpace(apiToken)
	server, err := c.kubectl("config", "view", "--minify", "--raw", "--flatten", "-o", "jsonpath={.clusters[0].cluster.server}")
	if err != nil {
		t.Fatalf("%v %s", err, server)
	}
	ca, err := c.kubectl("config", "view", "--minify", "--raw", "--flatten", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
	if err != nil {
		t.Fatalf("%v %s", err, ca)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: harvest, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: harvest, namespace: %s}}]
current-context: c
`, strings.TrimSpace(server), strings.TrimSpace(ca), apiToken, clusterNS)
	if err := os.WriteFile(kubeconfig, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(c.lookPath("kubectl"), "--kubeconfig", kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "threat-harvest") {
		t.Fatalf("the kubeconfig does not authenticate as threat-harvest: %v %s", err, out)
	}

	var mu sync.Mutex
	var seen []string // every call's authorization values
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		mu.Lock()
		seen = append(seen, strings.Join(md.Get("authorization"), ","))
		mu.Unlock()
		return status.Error(codes.Unauthenticated, "the recorder takes no one")
	}))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	agentctl := func(extra ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, c.lookPath("agentctl"), append([]string{"status", "--transport", "grpc", "--gateway", lis.Addr().String()}, extra...)...)
		for _, e := range c.environ() {
			if !strings.HasPrefix(e, "AGENTCTL_") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	out := agentctl()
	mu.Lock()
	calls := append([]string(nil), seen...)
	seen = nil
	mu.Unlock()
	if len(calls) == 0 {
		t.Fatalf("agentctl made no call to the recorder: %s", out)
	}
	for _, a := range calls {
		if strings.Contains(a, apiToken) {
			t.Fatalf("agentctl sent the kubeconfig's token to the gateway address it was given: %s", out)
		}
	}
	out = agentctl("--gateway-token", "decoy-gateway-token")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || !strings.Contains(strings.Join(seen, " "), "Bearer decoy-gateway-token") {
		t.Errorf("the recorder did not see the --gateway-token (%q): it could not have seen the kubeconfig's either: %s", seen, out)
	}
}

// checkHealthWatchBound: grpc.health.v1 Watch needs no credential, so the server bounds how many
// one address holds (grpcx.HealthWatchPerAddress, 32); a pod (an address of its own, unlike a
// port-forward's loopback) holds 32 of status-writer's and is refused the 33rd.
func (c *kcluster) checkHealthWatchBound(t *testing.T) {
	version := c.chartVersion(t)
	image := c.registry + "/agentplane/status-writer:" + strings.TrimPrefix(version[strings.Index(version, "-g"):], "-g")
	target := "agentplane-status-writer." + clusterNS + ".svc:50051"
	if ok, logs := c.podRun(t, "threat-watcher", "threat-watcher", image, "probe", "--timeout=60s", "--watches=32", target); !ok || !strings.Contains(logs, "32 watches held") {
		t.Errorf("32 health watches from one pod: %v %s, want all held", ok, logs)
	}
	ok, logs := c.podRun(t, "threat-watcher", "threat-watcher", image, "probe", "--timeout=60s", "--watches=33", target)
	if ok || !strings.Contains(logs, "watch 33 of 33 refused, 32 held") || !strings.Contains(logs, "ResourceExhausted") {
		t.Errorf("33 health watches from one pod: %v %s, want the 33rd refused (ResourceExhausted)", ok, logs)
	}
}

func (c *kcluster) checkRealRunRedaction(t *testing.T) {
	known := "hunter2-" + randomHex(8)                                   // the Secret's value: no shape, known only to event-emitter
	shape := "ghp_" + strings.ToUpper(randomHex(6)) + randomHex(12)[:24] // a GitHub token's shape
	t.Cleanup(func() {
		_, _ = c.kubectlRuns("delete", "agentrun/threat-leak", "secret/threat-leak", "--ignore-not-found", "--wait=false")
	})
	if out, err := c.kubectlRuns("create", "secret", "generic", "threat-leak", "--from-literal=token="+known); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// An admin's run names the Secret and, by mistake, pastes both strings where a number goes:
	// run-controller fails it InvalidSpec with a message that quotes the value.
	run := fmt.Sprintf(`apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata: {name: threat-leak}
spec:
  agentRef: {name: codex}
  runtime: {type: job, config: {timeoutSeconds: "%s %s"}}
  secrets: [threat-leak]
`, shape, known)
	if out, err := c.kubectlRunsIn(run, "create", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	var message string
	eventually(t, 90*time.Second, "the run failed InvalidSpec", func() error {
		out, err := c.kubectlRuns("get", "agentrun", "threat-leak", "-o", "jsonpath={.status.phase}/{.status.reason}/{.status.message}")
		if err != nil || !strings.HasPrefix(out, "Failed/InvalidSpec/") {
			return errorf("%v %q", err, out)
		}
		message = out
		return nil
	})
	if !strings.Contains(message, "is not a whole number") {
		t.Errorf("status message %q does not say what was wrong", message)
	}
	if strings.Contains(message, shape) {
		t.Errorf("a token shape reached the run's status: %q", message)
	}
	var events string
	eventually(t, 60*time.Second, "the run's Warning event", func() error {
		out, err := c.kubectlRuns("get", "events", "--field-selector", "involvedObject.name=threat-leak,type=Warning", "-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		if err != nil || !strings.Contains(out, "InvalidSpec: ") {
			return errorf("%v %q", err, out)
		}
		events = out
		return nil
	})
	if !strings.Contains(events, "is not a whole number") {
		t.Errorf("the event %q does not say what was wrong", events)
	}
	for what, s := range map[string]string{"the Secret's value": known, "a token shape": shape} {
		if strings.Contains(events, s) {
			t.Errorf("%s reached the run's event: %q", what, events)
		}
	}
	logs, err := c.kubectl("logs", "deployment/agentplane-run-controller", "--since=10m")
	if err != nil || !strings.Contains(logs, "threat-leak") {
		t.Fatalf("run-controller's log does not mention the run: %v", err)
	}
	if strings.Contains(logs, shape) {
		t.Error("a token shape reached run-controller's log")
	}
}

// gatewayClient trusts the CA the chart publishes for watch-gateway and returns a port-forward's
// base URL to its HTTPS port.
func (c *kcluster) gatewayClient(t *testing.T) (*http.Client, string) {
	t.Helper()
	const svc = "agentplane-watch-gateway"
	ca, err := c.kubectl("get", "configmap", svc+"-ca", "-o", `jsonpath={.data.ca\.crt}`)
	roots := x509.NewCertPool()
	if err != nil || !roots.AppendCertsFromPEM([]byte(ca)) {
		t.Fatalf("the gateway's CA (ConfigMap %s-ca): %v %q", svc, err, ca)
	}
	port := c.portForward(t, "svc/"+svc, 8080)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 200}}, "https://localhost:" + port
}

// gatewayUser makes a ServiceAccount in the control plane's namespace bound to the gateway's
// status-viewer Role (what a console sign-in and a status stream need, and nothing on runs) and
// returns its username and a token of the gateway's audience.
func (c *kcluster) gatewayUser(t *testing.T, name string) (string, string) {
	t.Helper()
	must := func(args ...string) string {
		t.Helper()
		out, err := c.kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(out)
	}
	must("create", "serviceaccount", name)
	t.Cleanup(func() {
		_, _ = c.kubectl("delete", "serviceaccount/"+name, "rolebinding/"+name+"-status", "--ignore-not-found")
	})
	must("create", "rolebinding", name+"-status", "--role", "agentplane-watch-gateway-status-viewer", "--serviceaccount", clusterNS+":"+name)
	return "system:serviceaccount:" + clusterNS + ":" + name, must("create", "token", name, "--audience", "agentplane-gateway")
}

func (c *kcluster) checkConsoleCancelRefusals(t *testing.T) {
	client, base := c.gatewayClient(t)
	_, token := c.gatewayUser(t, "threat-trudy")
	send := func(method, path string, header http.Header, body string) (int, string, []*http.Cookie) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header = header.Clone()
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b), resp.Cookies()
	}
	var (
		session http.Header
		csrf    string
	)
	eventually(t, 30*time.Second, "trudy signs in to the console", func() error {
		code, body, cookies := send(http.MethodPost, "/console/api/session", http.Header{}, fmt.Sprintf(`{"token":%q}`, token))
		if code != http.StatusOK {
			return errorf("%d %s", code, body)
		}
		var who struct {
			CSRF string `json:"csrf"`
		}
		if err := json.Unmarshal([]byte(body), &who); err != nil || who.CSRF == "" || len(cookies) == 0 {
			return errorf("no CSRF token or session cookie: %s", body)
		}
		ck := cookies[0]
		session, csrf = http.Header{"Cookie": {ck.Name + "=" + ck.Value}}, who.CSRF
		return nil
	})
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	const cancel = "/console/api/runs/AgentRun/hello/cancel"
	for _, tc := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"without the CSRF token", session, "refused"},
		{"from another origin", with(session, "X-CSRF-Token", csrf, "Origin", "https://evil.example"), "refused"},
		{"from another site (fetch)", with(session, "X-CSRF-Token", csrf, "Sec-Fetch-Site", "cross-site"), "refused"},
		{"without patch rights on runs", with(session, "X-CSRF-Token", csrf), "may not patch agentruns"},
	} {
		if code, body, _ := send(http.MethodPost, cancel, tc.header, ""); code != http.StatusForbidden || !strings.Contains(body, tc.want) {
			t.Errorf("trudy's cancel %s: %d %s, want 403 saying %q", tc.name, code, body, tc.want)
		}
	}
	if out, err := c.kubectlRuns("get", "agentrun", "hello", "-o", "jsonpath={.spec.cancel}"); err != nil || strings.TrimSpace(out) == "true" {
		t.Errorf("hello after the refused cancels: %v spec.cancel=%q", err, out)
	}
}

func (c *kcluster) checkStreamBound(t *testing.T) {
	const perUser = 100 // JANGAR_WATCH_MAX_STREAMS_PER_USER's default, which the chart keeps
	client, base := c.gatewayClient(t)
	_, token := c.gatewayUser(t, "threat-hoarder")
	url := base + "/api/agents/control-plane/status/stream"
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// open starts a watch: its body (held open until closed), or the refusal's code and text.
	open := func() (io.Closer, int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req) //nolint:bodyclose // a watch's body stays open: the caller closes what open returns
		if err != nil {
			return nil, 0, "", err
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			return nil, resp.StatusCode, string(b), nil
		}
		return resp.Body, http.StatusOK, "", nil
	}
	var held []io.Closer
	defer func() {
		for _, r := range held {
			_ = r.Close()
		}
	}()
	eventually(t, 30*time.Second, "the bound token streams", func() error {
		r, code, body, err := open()
		if err != nil || code != http.StatusOK {
			return errorf("%v %d %s", err, code, body)
		}
		held = append(held, r)
		return nil
	})
	for len(held) < perUser {
		r, code, body, err := open()
		if err != nil || code != http.StatusOK {
			t.Fatalf("watch %d of %d: %v %d %s", len(held)+1, perUser, err, code, body)
		}
		held = append(held, r)
	}
	if r, code, body, err := open(); err != nil || code != http.StatusTooManyRequests || !strings.Contains(body, "JANGAR_WATCH_MAX_STREAMS_PER_USER") {
		if r != nil {
			_ = r.Close()
		}
		t.Fatalf("watch %d: %v %d %s, want 429 naming JANGAR_WATCH_MAX_STREAMS_PER_USER", perUser+1, err, code, body)
	}
	_ = held[0].Close()
	held = held[1:]
	eventually(t, 30*time.Second, "a freed slot is taken again", func() error {
		r, code, body, err := open()
		if err != nil || code != http.StatusOK {
			return errorf("%v %d %s", err, code, body)
		}
		held = append(held, r)
		return nil
	})
}

// checkRecordAndMetadata (part of checkThreats, with its user mallory): the creator record a
// run's creator writes is replaced by the API server's, and no one may change it afterwards; a
// user with only patch on runs (the console-operator Role's right) may set spec.cancel and
// nothing in the run's metadata.
func (c *kcluster) checkRecordAndMetadata(t *testing.T) {
	must := func(args ...string) {
		t.Helper()
		if out, err := c.kubectlRuns(args...); err != nil {
			t.Fatalf("kubectl %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() {
		_, _ = c.kubectlRuns("delete", "agentrun/threat-forged", "role/threat-patch-only", "rolebinding/threat-patcher", "--ignore-not-found", "--wait=false")
	})
	forged := `apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata:
  name: threat-forged
  annotations: {agents.proompteng.ai/created-by: admin, agents.proompteng.ai/creator-may-get-secrets: threat-root}
spec:
  agentRef: {name: codex}
  runtime: {type: job}
`
	if out, err := c.kubectlRunsIn(forged, "create", "--as", "mallory", "-f", "-"); err != nil {
		t.Fatalf("mallory's run: %v %s", err, out)
	}
	out, err := c.kubectlRuns("get", "agentrun", "threat-forged", "-o",
		`jsonpath={.metadata.annotations.agents\.proompteng\.ai/created-by}|{.metadata.annotations.agents\.proompteng\.ai/creator-may-get-secrets}`)
	if by, secrets, _ := strings.Cut(strings.TrimSpace(out), "|"); err != nil || by != "mallory" || strings.Contains(secrets, "threat-root") {
		t.Errorf("mallory's forged creator record: %v %q, want created-by mallory and no threat-root", err, out)
	}
	out, err = c.kubectlRuns("annotate", "agentrun", "threat-forged", "--overwrite", "agents.proompteng.ai/created-by=admin")
	if err == nil || !strings.Contains(out, "cannot change") {
		t.Errorf("changing a run's creator record: %v %s, want the API server's refusal", err, out)
	}
	must("create", "role", "threat-patch-only", "--verb=get,patch", "--resource=agentruns.agents.proompteng.ai")
	must("create", "rolebinding", "threat-patcher", "--role=threat-patch-only", "--user=patcher")
	out, err = c.kubectlRuns("annotate", "--as", "patcher", "agentrun", "threat-forged", "agentplane.dev/simulate-exit-code=0")
	if err == nil || !strings.Contains(out, "may not change the metadata.annotations") {
		t.Errorf("a simulate annotation set with patch alone: %v %s, want refused (it needs update)", err, out)
	}
	out, err = c.kubectlRuns("patch", "--as", "patcher", "agentrun", "threat-forged", "--type=merge", "-p", `{"spec":{"cancel":true}}`)
	if err != nil {
		t.Errorf("spec.cancel set with patch alone: %v %s, want allowed (the console's cancel)", err, out)
	}
}
