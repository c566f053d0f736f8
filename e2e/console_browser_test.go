//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/agentplane/agentplane/libs/testenv"
)

// browser is one headless Chromium tab (Debian's chromium, driven through chromedp) that keeps
// every console error, uncaught exception and error log entry (failed requests, CSP violations)
// the pages it shows report.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu       sync.Mutex
	problems []string
}

// chromiumPath is Debian's chromium, which hack/deps.sh installs.
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: run `make deps` (hack/deps.sh installs Debian's chromium)")
	return ""
}

func newBrowser(t testing.TB, shots string) (context.Context, func()) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // the tests run as root, where Chromium's sandbox cannot start
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-gpu", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start Chromium: %v", err)
	}
	if shots != "" {
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, func() { cancelCtx(); cancelAlloc() }
}

func openBrowser(t *testing.T, shots string) *browser {
	t.Helper()
	ctx, stop := newBrowser(t, shots)
	t.Cleanup(stop)
	b := &browser{t: t, ctx: ctx, shots: shots}
	consoleCalls := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	entries := chromedp.Events(ctx, log.EntryAdded)
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev, err := range consoleCalls {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, fmt.Sprint(a.Description, string(a.Value)))
				}
				b.problem("console." + string(ev.Type) + ": " + strings.Join(args, " "))
			}
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
			b.problem("exception: " + msg)
		}
	}()
	go func() {
		for ev, err := range entries {
			if err != nil {
				return
			}
			if ev.Entry.Level == log.EntryLevelError {
				b.problem(fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}()
	return b
}

func (b *browser) problem(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, s)
}

// mark is how many problems were seen so far; since returns those seen after a mark.
func (b *browser) mark() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.problems)
}

func (b *browser) since(mark int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems[mark:]...)
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (page problems: %v)", what, err, b.since(0))
	}
}

// await waits, in the page, until the JavaScript expression is true: the DOM is polled on every
// animation frame, nothing is timed. timeout only guards against a hang.
func (b *browser) await(what, expr string, timeout time.Duration) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText.slice(0, 2000) : ""`))
		b.shot("failed-" + strings.NewReplacer(" ", "-", "'", "", "/", "-").Replace(what))
		b.t.Fatalf("%s: %v\npage: %s\nproblems: %v", what, err, text, b.since(0))
	}
}

func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot writes a screenshot of the whole page into the artifacts folder.
func (b *browser) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil { //nolint:gosec // G306: a test artifact
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

// cookies returns the browser's cookies for url.
func (b *browser) cookies(url string) []*network.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{url}})
	if err != nil {
		b.t.Fatal(err)
	}
	return res.Cookies
}

// artifactsDir is where the browser tests write their screenshots: AGENTPLANE_ARTIFACTS, else
// .artifacts/ in the repository (git-ignored).
func artifactsDir(t testing.TB, name string) string {
	base := os.Getenv("AGENTPLANE_ARTIFACTS")
	if base == "" {
		base = filepath.Join(repoRoot(t), ".artifacts")
	}
	return filepath.Join(base, name)
}

// consoleOffset moves the console test's stack off the others' ports: none of its ports is one of
// the whole-system stack's (offset 6000, which runs beside it; 2000 would put Redis on that
// stack's etcd port) or of the stacks at 1000 and 3000, and its gRPC ports are in the range
// .ci/run reserves. The scale benchmark uses it too, never at the same time.
const consoleOffset = 4000

// consoleStack is a local control plane for the console tests, with watch-gateway as `make up`
// runs it (auth none) and a second one in token mode, as the chart runs it by default.
type consoleStack struct {
	dir, kubeconfig string
	kubectl         func(args ...string) (string, error)
	apply           func(yaml string)
	noneURL         string
	tokenURL        string
	tokenGRPC       string
}

func startConsoleStack(t *testing.T) consoleStack {
	t.Helper()
	root := repoRoot(t)
	ctx := context.Background()
	dir, _ := localStack(t, consoleOffset, 100)
	s := consoleStack{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}
	kubectlBin := mustExist(t, filepath.Join(root, "bin", "envtest", "kubectl"), "tools")
	s.kubectl = func(args ...string) (string, error) {
		return run(ctx, t, nil, kubectlBin, append([]string{"--kubeconfig", s.kubeconfig, "-n", "agents"}, args...)...)
	}
	n := 0
	s.apply = func(yaml string) {
		t.Helper()
		n++
		f := filepath.Join(t.TempDir(), fmt.Sprintf("obj-%d.yaml", n))
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := s.kubectl("apply", "-f", f); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	s.noneURL = fmt.Sprintf("http://localhost:%d/", 18101+consoleOffset)

	// The token-mode gateway: sessions signed with a key from a file (as the chart mounts it), the
	// status history in the stack's Redis, the same services to follow.
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "session-key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, svc := range services {
		targets = append(targets, fmt.Sprintf("%s=127.0.0.1:%d", svc, servicePorts[svc][0]+consoleOffset))
	}
	httpPort, grpcPort := startGatewayProcess(t, s.kubeconfig, "agents", filepath.Join(dir, "token-gateway.log"),
		"JANGAR_WATCH_AUTH_MODE=token", fmt.Sprintf("JANGAR_REDIS_URL=redis://127.0.0.1:%d/0", 16379+consoleOffset),
		"JANGAR_CONSOLE_SESSION_KEY_FILE="+keyFile, "JANGAR_WATCH_TARGETS="+strings.Join(targets, ","), "JANGAR_LOG_FORMAT=text",
		fmt.Sprintf("JANGAR_ARCHIVE_URL=postgres://agentplane@127.0.0.1:%d/agentplane?sslmode=disable", 15432+consoleOffset))
	s.tokenURL = fmt.Sprintf("http://localhost:%d/", httpPort)
	s.tokenGRPC = fmt.Sprintf("127.0.0.1:%d", grpcPort)
	return s
}

// startGatewayProcess runs bin/watch-gateway against kubeconfig for namespace, on free loopback
// ports, with env added (NAME=value), until the test ends; its output goes to logFile. It returns
// the HTTP and gRPC ports once the HTTP server answers.
func startGatewayProcess(tb testing.TB, kubeconfig, namespace, logFile string, env ...string) (httpPort, grpcPort int) {
	tb.Helper()
	var err error
	if grpcPort, err = testenv.FreePort(); err != nil {
		tb.Fatal(err)
	}
	if httpPort, err = testenv.FreePort(); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(repoRoot(tb), "bin", "watch-gateway"))
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig, "POD_NAMESPACE="+namespace, "JANGAR_AGENTS_CONTROLLER_NAMESPACES="+namespace,
		"JANGAR_GRPC_HOST=127.0.0.1", fmt.Sprintf("JANGAR_GRPC_PORT=%d", grpcPort), fmt.Sprintf("JANGAR_HTTP_ADDR=127.0.0.1:%d", httpPort),
		"JANGAR_METRICS_ADDR=127.0.0.1:0"), env...)
	out, err := os.Create(logFile) //nolint:gosec // G304: a test's own folder
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = out.Close() })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/", httpPort)); err == nil {
			return httpPort, grpcPort
		}
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(logFile) //nolint:gosec // G304: a test's own folder
			tb.Fatalf("watch-gateway never answered on 127.0.0.1:%d:\n%s", httpPort, raw)
		}
	}
}

// token creates the ServiceAccount agents/name, binds it to the watch-gateway chart's Role
// role, and returns a token for it.
func (s consoleStack) token(t *testing.T, name, role string) string {
	t.Helper()
	if out, err := s.kubectl("create", "serviceaccount", name); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := s.kubectl("create", "rolebinding", name, "--role", role, "--serviceaccount", "agents:"+name); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	tok, err := s.kubectl("create", "token", name, "--duration", "1h", "--audience", "agentplane-gateway")
	if err != nil {
		t.Fatalf("%v %s", err, tok)
	}
	return strings.TrimSpace(tok)
}

// chartRoles applies the Roles the watch-gateway chart renders for users of its console.
func (s consoleStack) chartRoles(t *testing.T) {
	t.Helper()
	root := repoRoot(t)
	helm := mustExist(t, filepath.Join(root, helmPath), "tools")
	out, err := exec.Command(helm, "template", "wg", filepath.Join(root, "charts", "watch-gateway"), "-n", "agents",
		"--kube-version", renderKubeVersion, "--show-only", "templates/rbac.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var roles []string
	for _, doc := range strings.Split(string(out), "\n---") {
		if strings.Contains(doc, "kind: Role\n") && (strings.Contains(doc, "name: wg-watch-gateway-console-viewer") || strings.Contains(doc, "name: wg-watch-gateway-console-operator")) {
			roles = append(roles, doc)
		}
	}
	if len(roles) != 2 {
		t.Fatalf("the chart renders %d console Roles, want the viewer's and the operator's:\n%s", len(roles), out)
	}
	s.apply(strings.Join(roles, "\n---\n"))
}

func agentRunYAML(name, duration string) string {
	ann := ""
	if duration != "" {
		ann = fmt.Sprintf("  annotations:\n    agentplane.dev/simulate-duration: %q\n", duration)
	}
	return fmt.Sprintf(`apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata:
  name: %s
%sspec:
  agentRef:
    name: codex
  runtime:
    type: job
`, name, ann)
}

// TestConsoleInABrowser is issue 17's browser test, on the local control plane (`make up`) with
// Debian's Chromium: the console of the `make up` gateway (no sign-in) and of a gateway in token
// mode. Every wait is on the page's DOM (chromedp.Poll), never a sleep; screenshots of each page
// go to .artifacts/console/ (AGENTPLANE_ARTIFACTS moves them).
func TestConsoleInABrowser(t *testing.T) {
	root := repoRoot(t)
	s := startConsoleStack(t)
	b := openBrowser(t, artifactsDir(t, "console"))
	for _, f := range []string{"agent.yaml", "orchestration.yaml"} {
		if out, err := s.kubectl("apply", "-f", filepath.Join(root, "examples", f)); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	s.chartRoles(t)
	operator := s.token(t, "console-operator", "wg-watch-gateway-console-operator")
	reader := s.token(t, "console-reader", "wg-watch-gateway-console-viewer")
	const minute = time.Minute

	// `make up`'s gateway (auth none): the page loads with no error and shows every service.
	start := b.mark()
	b.do("open the make-up console", chromedp.Navigate(s.noneURL))
	b.await("the health table", `document.querySelectorAll("#components tbody tr").length >= 10 &&
		[...document.querySelectorAll("#components tbody tr")].some(r => r.dataset.component === "run-controller" && r.querySelector(".status-cell").textContent === "healthy")`, minute)
	b.await("the health stream live", `document.getElementById("health-state").textContent === "live"`, minute)
	if p := b.since(start); len(p) > 0 {
		t.Fatalf("the make-up console's page reported errors: %v", p)
	}
	b.shot("health")

	// Token mode: a sign-in form; a bad token is refused and sets no cookie. (Cookies are per host,
	// not per port: the make-up gateway's anonymous session goes first.)
	if _, err := chromedp.Call(b.ctx, network.ClearBrowserCookies, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	b.do("open the token-mode console", chromedp.Navigate(s.tokenURL))
	b.await("the sign-in form", `!document.getElementById("view-signin").hidden`, minute)
	if p := b.since(start); len(p) > 0 {
		t.Fatalf("the sign-in page reported errors: %v", p)
	}
	b.shot("signin")
	beforeBad := b.mark()
	b.do("sign in with a bad token", chromedp.SendKeys(chromedp.ID("token"), "not-a-real-token"), chromedp.Click(chromedp.CSS(`#signin-form button`)))
	b.await("the refusal", `!document.getElementById("signin-error").hidden && document.getElementById("signin-error").textContent.includes("refused without review")`, minute)
	for _, c := range b.cookies(s.tokenURL) {
		if strings.HasPrefix(c.Name, "agentplane_session") {
			t.Fatal("a refused sign-in left a session cookie")
		}
	}
	if v := evalJS[string](b, `document.getElementById("token").value`); v != "" {
		t.Fatal("the token field kept the refused token")
	}
	if p := b.since(beforeBad); len(p) != 1 || !strings.Contains(p[0], "401") {
		t.Fatalf("the refused sign-in: page problems %v, want the one 401", p)
	}

	// The operator signs in: the token becomes an HttpOnly, Secure, SameSite=Strict cookie and
	// appears nowhere in the page or its URL.
	afterBad := b.mark()
	b.do("sign in as the operator", chromedp.SendKeys(chromedp.ID("token"), operator), chromedp.Click(chromedp.CSS(`#signin-form button`)))
	b.await("the health view", `!document.getElementById("view-health").hidden && document.querySelectorAll("#components tbody tr").length >= 10`, minute)
	var session *network.Cookie
	for _, c := range b.cookies(s.tokenURL) {
		// Named after the gateway's namespace (two gateways on one host keep their sessions apart).
		if c.Name == "agentplane_session_agents" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || !session.Secure || session.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("the session cookie: %+v", session)
	}
	if strings.Contains(session.Value, operator) {
		t.Fatal("the session cookie holds the token")
	}
	if html := evalJS[string](b, `document.documentElement.outerHTML + location.href + document.cookie`); strings.Contains(html, operator) {
		t.Fatal("the token appears in the page, its URL or a script-readable cookie")
	}
	b.await("the signed-in user shown", `document.getElementById("who").textContent.includes("console-operator")`, minute)

	// A component's change shows without a reload: a Deployment labelled as an agentplane service
	// appears as a component, and goes when it is deleted.
	evalJS[bool](b, `(window.__sameDocument = true)`)
	s.apply(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: console-probe
  labels: {app.kubernetes.io/part-of: agentplane, app.kubernetes.io/name: console-probe}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: console-probe}}
  template:
    metadata:
      labels: {app.kubernetes.io/part-of: agentplane, app.kubernetes.io/name: console-probe}
    spec:
      containers: [{name: probe, image: registry.example.com/probe:1}]
`)
	b.await("console-probe appears", `!!document.querySelector('#components tr[data-component="console-probe"]')`, minute)
	if out, err := s.kubectl("delete", "deployment", "console-probe"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	b.await("console-probe no longer reported", `(() => { const r = document.querySelector('#components tr[data-component="console-probe"]');
		return r && r.querySelector(".status-cell").textContent === "unknown" && r.querySelector(".message").textContent === "no longer reported"; })()`, minute)
	if !evalJS[bool](b, `window.__sameDocument === true`) {
		t.Fatal("the page was reloaded")
	}

	// Runs: a new run appears and moves to Succeeded, live.
	b.do("open the runs page", chromedp.Evaluate[chromedp.Void](`location.hash = "#/runs"`))
	b.await("the runs stream live", `document.getElementById("runs-state").textContent === "live"`, minute)
	s.apply(agentRunYAML("console-hello", ""))
	b.await("console-hello appears", `!!document.querySelector('#runs tr[data-key="AgentRun/console-hello"]')`, minute)
	b.await("console-hello Succeeded", `document.querySelector('#runs tr[data-key="AgentRun/console-hello"] .phase-cell').textContent === "Succeeded"`, 3*minute)
	b.shot("runs")
	if p := b.since(afterBad); len(p) > 0 {
		t.Fatalf("the signed-in pages reported errors: %v", p)
	}

	// openListed opens a run's page once the runs page lists it: the console serves a run from
	// the gateway's cache, which sees a run a moment after kubectl apply returns, and a page
	// opened before that gets a 404 (shown as "not there", but the browser logs the 404 as a
	// page error, which this test counts).
	openListed := func(kind, name string) {
		t.Helper()
		b.do("open the runs page", chromedp.Evaluate[chromedp.Void](`location.hash = "#/runs"`))
		b.await(name+" listed", fmt.Sprintf(`!!document.querySelector('#runs tr[data-key="%s/%s"]')`, kind, name), minute)
		b.do("open "+name, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = "#/run/%s/%s"`, kind, name)))
	}

	// The steps graph follows the phases: every change of the graph is recorded in the page as
	// it happens (a MutationObserver); each step's fill must be its phase's colour.
	s.apply(`apiVersion: orchestration.proompteng.ai/v1alpha1
kind: OrchestrationRun
metadata:
  name: console-diamond
spec:
  orchestrationRef: {name: plan-and-implement}
`)
	openListed("OrchestrationRun", "console-diamond")
	b.await("the graph drawn", `document.querySelectorAll("#run-graph g.step").length === 4`, minute)
	evalJS[bool](b, `(() => {
		window.__graph = [];
		const record = () => window.__graph.push([...document.querySelectorAll("#run-graph g.step")].map(g => ({
			step: g.dataset.step, phase: g.dataset.phase, label: g.querySelector(".phase-label").textContent,
			fill: getComputedStyle(g.querySelector("rect")).fill })));
		record();
		new MutationObserver(record).observe(document.getElementById("run-graph"), {subtree: true, childList: true, attributes: true});
		return true; })()`)
	b.await("the diamond Succeeded on the graph", `[...document.querySelectorAll("#run-graph g.step")].every(g => g.dataset.phase === "Succeeded") &&
		document.getElementById("run-phase").textContent === "Succeeded"`, 4*minute)
	b.shot("run-orchestration")
	type node struct{ Step, Phase, Label, Fill string }
	samples := evalJS[[][]node](b, `window.__graph`)
	fills := map[string]string{"Pending": "rgb(238, 241, 244)", "Running": "rgb(221, 244, 255)", "Succeeded": "rgb(218, 251, 225)",
		"Failed": "rgb(255, 235, 233)", "Cancelled": "rgb(251, 239, 255)"}
	seen := map[string]bool{}
	for _, sample := range samples {
		var state []string
		for _, n := range sample {
			if n.Fill != fills[n.Phase] || n.Label != n.Phase {
				t.Fatalf("step %s shows phase %q (label %q) in %s, want %s", n.Step, n.Phase, n.Label, n.Fill, fills[n.Phase])
			}
			state = append(state, n.Step+"="+n.Phase)
		}
		seen[strings.Join(state, ",")] = true
	}
	if len(seen) < 3 {
		t.Fatalf("the graph went through %d states (%v); it did not follow the run live", len(seen), seen)
	}
	if out, err := s.kubectl("get", "orchestrationrun", "console-diamond", "-o", "jsonpath={range .status.stepStatuses[*]}{.phase} {end}"); err != nil ||
		strings.TrimSpace(out) != "Succeeded Succeeded Succeeded Succeeded" {
		t.Fatalf("the API's step phases: %q (%v)", out, err)
	}

	// Cancel on a long run ends in Cancelled.
	s.apply(agentRunYAML("console-long", "600s"))
	openListed("AgentRun", "console-long")
	b.await("console-long Running", `document.getElementById("run-phase").textContent === "Running"`, 2*minute)
	b.await("the Cancel button", `!document.getElementById("cancel").hidden`, minute)
	b.do("click Cancel", chromedp.Click(chromedp.ID("cancel")))
	b.await("console-long Cancelled", `document.getElementById("run-phase").textContent === "Cancelled"`, 2*minute)
	b.await("the cancellation's condition", `[...document.querySelectorAll("#run-conditions tbody tr")].some(r =>
		r.cells.length > 2 && r.cells[0].textContent === "Cancelled" && r.cells[1].textContent === "True" && r.cells[2].textContent === "Cancelled")`, minute)
	b.shot("run-cancelled")
	if out, _ := s.kubectl("get", "agentrun", "console-long", "-o", "jsonpath={.spec.cancel} {.status.phase}"); out != "true Cancelled" {
		t.Fatalf("console-long through the API: %q", out)
	}
	if p := b.since(afterBad); len(p) > 0 {
		t.Fatalf("the signed-in pages reported errors: %v", p)
	}

	// A user without patch permission sees no Cancel button, and a request forged in the page is
	// refused: without the CSRF token, and with it (the API server says no).
	s.apply(agentRunYAML("console-long-2", "600s"))
	b.do("sign out", chromedp.Click(chromedp.ID("signout")))
	b.await("the sign-in form again", `!document.getElementById("view-signin").hidden`, minute)
	b.do("sign in as the reader", chromedp.SendKeys(chromedp.ID("token"), reader), chromedp.Click(chromedp.CSS(`#signin-form button`)))
	b.await("the reader signed in", `document.getElementById("who").textContent.includes("console-reader")`, minute)
	b.do("open console-long-2", chromedp.Evaluate[chromedp.Void](`location.hash = "#/run/AgentRun/console-long-2"`))
	b.await("console-long-2 Running with its details", `document.getElementById("run-phase").textContent === "Running" &&
		document.querySelectorAll("#run-conditions tbody tr td").length > 1`, 2*minute)
	// The page's state is awaited, not read once: it reloads a run's details while the runs stream
	// moves (state.detail is null meanwhile; CI read it in that window). A reader offered Cancel
	// never satisfies this.
	b.await("the reader offered no Cancel", `document.getElementById("cancel").hidden &&
		window.agentplaneConsole.state.detail !== null && window.agentplaneConsole.state.detail.can_cancel === false`, minute)
	b.shot("run-reader")
	forged := evalJS[string](b, `(async () => {
		const url = "/console/api/runs/AgentRun/console-long-2/cancel";
		const bare = await fetch(url, {method: "POST"});
		const s = await (await fetch("/console/api/session")).json();
		const withToken = await fetch(url, {method: "POST", headers: {"X-CSRF-Token": s.csrf}});
		return bare.status + " " + (await bare.text()).trim() + " | " + withToken.status + " " + (await withToken.text()).trim();
	})()`)
	if !strings.HasPrefix(forged, "403 ") || !strings.Contains(forged, "CSRF") || !strings.Contains(forged, "| 403 ") || !strings.Contains(forged, "may not patch agentruns") {
		t.Fatalf("forged cancels: %s", forged)
	}
	if out, _ := s.kubectl("get", "agentrun", "console-long-2", "-o", "jsonpath={.spec.cancel}"); out == "true" {
		t.Fatal("a refused cancel was written")
	}

	// History: the timeline shows console-probe's transitions, and agentctl reads the same.
	b.do("open the history", chromedp.Evaluate[chromedp.Void](`location.hash = "#/history"`))
	b.await("console-probe on the timeline", `!!document.querySelector('#timeline rect[data-component="console-probe"]') &&
		[...document.querySelectorAll("#history tbody tr")].some(r => r.textContent.includes("console-probe"))`, minute)
	b.shot("history")
	out, err := exec.Command(binPath(t, "agentctl"), "status", "history", "--since", "2h", "--gateway", s.tokenGRPC, "--gateway-token", reader).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "console-probe") || !strings.Contains(string(out), "unknown") || !strings.HasPrefix(string(out), "TIME ") {
		t.Fatalf("agentctl status history: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath(t, "agentctl"), "status", "history", "--since", "2h", "--gateway", s.tokenGRPC).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bearer token") {
		t.Fatalf("agentctl status history without a token: %v\n%s", err, out)
	}

	// History lists the finished runs of the run archive too: a run deleted by hand is archived by
	// make up's job-gc first, and the reader (the console-viewer Role, which has no pods/log) sees
	// it, its Jobs and Events, and is told its logs are not shown.
	s.apply(agentRunYAML("console-archived", ""))
	eventually(t, 3*minute, "console-archived Succeeded", func() error {
		if out, err := s.kubectl("get", "agentrun", "console-archived", "-o", "jsonpath={.status.phase}"); err != nil || out != "Succeeded" {
			return errorf("phase %q %v", out, err)
		}
		return nil
	})
	if out, err := s.kubectl("delete", "agentrun", "console-archived", "--timeout", "60s"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	b.do("open the history again", chromedp.Evaluate[chromedp.Void](`location.hash = "#/history?archived"`))
	b.await("the archived run listed", `!document.getElementById("archive-box").hidden &&
		[...document.querySelectorAll("#archive tbody tr")].some(r => r.textContent.includes("console-archived") && r.textContent.includes("Succeeded"))`, minute)
	b.do("open the archived run", chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("#archive a")].find(a => a.textContent === "console-archived").click()`))
	b.await("its archived page", `!document.getElementById("view-archived").hidden && document.getElementById("archived-name").textContent === "console-archived" &&
		document.querySelectorAll("#archived-jobs tbody tr td").length > 1 && document.getElementById("archived-logs").textContent.includes("logs not shown: you may not get pods/log")`, minute)
	b.shot("archived-run")
	out, err = exec.Command(binPath(t, "agentctl"), "-n", "agents", "get", "runs", "--archived", "--gateway", s.tokenGRPC, "--gateway-token", reader).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "agentrun/console-archived") {
		t.Fatalf("agentctl get runs --archived as the reader: %v\n%s", err, out)
	}

	// The health page's heartbeat time, and a source's failure as a banner: cancel-propagator's
	// process is killed, its health stream breaks (an error event), and its row turns error.
	b.do("open the health page", chromedp.Evaluate[chromedp.Void](`location.hash = "#/"`))
	b.await("a heartbeat's time", `document.getElementById("heartbeat").hasAttribute("datetime")`, minute)
	raw, err := os.ReadFile(filepath.Join(s.dir, "run", "cancel-propagator.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("kill", "-KILL", strings.TrimSpace(string(raw))).CombinedOutput(); err != nil {
		t.Fatalf("kill cancel-propagator: %v %s", err, out)
	}
	b.await("the error banner", `!document.getElementById("banner").hidden && document.getElementById("banner-text").textContent.includes("cancel-propagator")`, minute)
	b.await("cancel-propagator in error", `document.querySelector('#components tr[data-component="cancel-propagator"] .status-cell').textContent === "error"`, minute)
	b.shot("health-error")

	// No token in the gateways' logs (they name users, never credentials).
	for _, f := range []string{filepath.Join(s.dir, "token-gateway.log"), filepath.Join(s.dir, "logs", "watch-gateway.log")} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for name, tok := range map[string]string{"operator": operator, "reader": reader} {
			if strings.Contains(string(raw), tok) || strings.Contains(string(raw), strings.Split(tok, ".")[2]) {
				t.Fatalf("%s holds the %s's token", f, name)
			}
		}
		if f == filepath.Join(s.dir, "token-gateway.log") && !strings.Contains(string(raw), "console sign-in") {
			t.Fatalf("%s does not log the sign-ins:\n%s", f, raw)
		}
	}
}
