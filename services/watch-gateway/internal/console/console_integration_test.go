//go:build integration

package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/gateway"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/runs"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/session"
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
		defer http.DefaultClient.CloseIdleConnections() // the tests' keep-alive connections
		return m.Run()
	}()))
}

// site is a gateway with the runs stream and the console, as service.Setup wires them.
type site struct {
	url, ns string
	src     *runs.Source
	keys    *session.Keys
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	if _, err := env.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// siteRecheck is how often a site's open streams re-check their reader; siteAllowTTL how long
// its reviewer reuses a token's review (0: the default, 30 s).
var (
	siteRecheck  = time.Minute
	siteAllowTTL time.Duration
)

func startSite(t *testing.T, ns string, mode access.Mode) site {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hub := health.NewHub(64, 64)
	hub.Update([]health.Item{{Component: "kube-apiserver", Status: health.Healthy}})
	ours, err := versioned.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	runsHub := health.NewHub(64, 256)
	src, err := runs.New(ours, ns, runsHub, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	keys := session.Random(time.Hour)
	gw := gateway.NewGateway(hub, ns, 30*time.Second, 100, nil)
	kinds := map[string]gateway.Authorizer{
		runs.KindAgentRun:         access.NewResourceReviewer(env.Client, ns, agentsv1alpha1.GroupVersion.Group, "agentruns", access.ReviewerOptions{}),
		runs.KindOrchestrationRun: access.NewResourceReviewer(env.Client, ns, orchv1alpha1.GroupVersion.Group, "orchestrationruns", access.ReviewerOptions{}),
	}
	var status *access.Reviewer
	var runsAuth gateway.Authorizer
	if mode == access.Token {
		status = access.NewReviewer(env.Client, ns, access.ReviewerOptions{AllowTTL: siteAllowTTL})
		gw.RequireToken(status, siteRecheck)
		runsAuth = gateway.AllOf{kinds[runs.KindAgentRun], kinds[runs.KindOrchestrationRun]}
	}
	gw.ServeRuns(runsHub, runsAuth)
	gw.AcceptSessions(keys)
	reads := map[string]gateway.Authorizer{
		ReadEvents:         access.NewResourceReviewer(env.Client, ns, "", "events", access.ReviewerOptions{}),
		ReadJobs:           access.NewResourceReviewer(env.Client, ns, "batch", "jobs", access.ReviewerOptions{}),
		ReadOrchestrations: access.NewResourceReviewer(env.Client, ns, orchv1alpha1.GroupVersion.Group, "orchestrations", access.ReviewerOptions{}),
	}
	con := &Console{Mode: mode, Namespace: ns, Sessions: keys, Kinds: kinds, Reads: reads, Runs: src, Kube: env.Client, Client: ours}
	if status != nil {
		con.Status = status
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+gateway.StreamPath, gw)
	mux.Handle("GET "+gateway.RunsStreamPath, gw.RunsHandler())
	mux.Handle("/", con.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return site{url: srv.URL, ns: ns, src: src, keys: keys}
}

// sseEvent is one event read off a stream.
type sseEvent struct {
	typ, id string
	data    health.Event
}

// readSSE follows url (with the request's headers) and sends each event.
func readSSE(t *testing.T, ctx context.Context, url string, header http.Header) (<-chan sseEvent, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // closed below, or by the reading goroutine
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, resp.StatusCode
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
			case line == "" && ev.typ != "":
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				ev = sseEvent{}
			}
		}
	}()
	return out, http.StatusOK
}

// next waits for the next snapshot or delta that satisfies ok.
func next(t *testing.T, events <-chan sseEvent, what string, ok func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("%s: the stream ended", what)
			}
			if (ev.typ == "snapshot" || ev.typ == "delta") && ok(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("%s: not seen in 30 s", what)
		}
	}
}

func itemOf(ev sseEvent, key string) (health.Item, bool) {
	for _, it := range ev.data.Items {
		if it.Component == key {
			return it, true
		}
	}
	return health.Item{}, false
}

func newRun(t *testing.T, ns, name string) *agentsv1alpha1.AgentRun {
	t.Helper()
	ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}}}
	rc, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	out := &agentsv1alpha1.AgentRun{}
	if err := rc.Post().Namespace(ns).Resource("agentruns").Body(ar).Do(context.Background()).Into(out); err != nil {
		t.Fatal(err)
	}
	return out
}

func setPhase(t *testing.T, ar *agentsv1alpha1.AgentRun, phase string) {
	t.Helper()
	rc, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	ar.Status.Phase = phase
	now := metav1.Now()
	if phase == "Running" {
		ar.Status.StartedAt = &now
	}
	if err := rc.Put().Namespace(ar.Namespace).Resource("agentruns").Name(ar.Name).SubResource("status").Body(ar).Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
}

func deleteRun(t *testing.T, ns, name string) {
	t.Helper()
	rc, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Delete().Namespace(ns).Resource("agentruns").Name(name).Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
}

// The runs stream: a snapshot of the namespace's runs, then a delta per change (a new run, a
// phase, a deletion named in "removed"), and a reconnect with a cursor resumes with exactly the
// deltas it missed.
func TestRunsStreamFollowsRunsWithTheHealthStreamsSemantics(t *testing.T) {
	ns := namespace(t, "console-runs")
	before := newRun(t, ns, "before")
	s := startSite(t, ns, access.None)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, code := readSSE(t, ctx, s.url+gateway.RunsStreamPath, nil)
	if code != http.StatusOK {
		t.Fatalf("runs stream: %d", code)
	}
	snap := next(t, events, "the snapshot", func(ev sseEvent) bool { return ev.typ == "snapshot" })
	if it, ok := itemOf(snap, "AgentRun/before"); !ok || it.Status != "Pending" || it.Details["agent"] != "codex" || it.Details["uid"] != string(before.UID) {
		t.Fatalf("snapshot items = %+v", snap.data.Items)
	}
	a := newRun(t, ns, "a")
	created := next(t, events, "a's creation", func(ev sseEvent) bool { _, ok := itemOf(ev, "AgentRun/a"); return ok })
	setPhase(t, a, "Running")
	running := next(t, events, "a Running", func(ev sseEvent) bool {
		it, ok := itemOf(ev, "AgentRun/a")
		return ok && it.Status == "Running" && it.Details["started"] != nil
	})
	deleteRun(t, ns, "a")
	removed := next(t, events, "a's removal", func(ev sseEvent) bool { return len(ev.data.Removed) == 1 && ev.data.Removed[0] == "AgentRun/a" })
	cancel()

	// Resume from the creation's cursor: exactly the two deltas after it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	resumed, _ := readSSE(t, ctx2, s.url+gateway.RunsStreamPath+"?since="+created.id, nil)
	first := next(t, resumed, "the first resumed event", func(sseEvent) bool { return true })
	second := next(t, resumed, "the second resumed event", func(sseEvent) bool { return true })
	if first.typ != "delta" || first.id != running.id || second.id != removed.id {
		t.Fatalf("resumed with %s %s then %s, want the deltas %s then %s", first.typ, first.id, second.id, running.id, removed.id)
	}
}

// signIn posts a token as the page does and returns the response.
func signIn(t *testing.T, base, token string, header http.Header) *http.Response {
	t.Helper()
	body := strings.NewReader(fmt.Sprintf(`{"token":%q}`, token))
	req, _ := http.NewRequest(http.MethodPost, base+"/console/api/session", body)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grant binds a Role with rules to the ServiceAccount ns/sa.
func grant(t *testing.T, kc kubernetes.Interface, ns, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "console-" + sa}, Rules: rules}
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

var (
	statusViewer = rbacv1.PolicyRule{APIGroups: []string{access.Group}, Resources: []string{"controlplane/status"}, Verbs: []string{"get", "watch"}}
	runReader    = []rbacv1.PolicyRule{
		{APIGroups: []string{agentsv1alpha1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{orchv1alpha1.GroupVersion.Group}, Resources: []string{"orchestrationruns"}, Verbs: []string{"get", "list", "watch"}},
	}
	runPatcher = []rbacv1.PolicyRule{
		{APIGroups: []string{agentsv1alpha1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"patch"}},
		{APIGroups: []string{orchv1alpha1.GroupVersion.Group}, Resources: []string{"orchestrationruns"}, Verbs: []string{"patch"}},
	}
)

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == session.CookieName {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", resp.Header.Values("Set-Cookie"))
	return nil
}

// Sign-in in token mode: a bad token and a user who may not watch the status are refused, with
// no token in the answer; an allowed user gets an HttpOnly, Secure, SameSite=Strict cookie that
// holds no token, which the streams accept in place of a bearer token (each with its own grant).
func TestSignInExchangesATokenForASessionCookie(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "console-signin")
	s := startSite(t, ns, access.Token)
	nobody, err := env.ServiceAccountToken(ctx, ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := env.ServiceAccountToken(ctx, ns, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	grant(t, env.Client, ns, "viewer", statusViewer)

	for name, tc := range map[string]struct {
		token string
		code  int
	}{"a bad token": {"not-a-token", http.StatusUnauthorized}, "a user without the Role": {nobody, http.StatusForbidden}, "no token": {"", http.StatusUnauthorized}} {
		resp := signIn(t, s.url, tc.token, nil)
		body := readBody(t, resp)
		if resp.StatusCode != tc.code || len(resp.Cookies()) != 0 {
			t.Errorf("%s: %d %s (cookies %v), want %d and no cookie", name, resp.StatusCode, body, resp.Cookies(), tc.code)
		}
		if tc.token != "" && strings.Contains(body, tc.token) {
			t.Errorf("%s: the answer repeats the token", name)
		}
	}
	// Another site's page cannot sign a visitor in.
	if resp := signIn(t, s.url, viewer, http.Header{"Origin": {"https://evil.example"}}); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("a sign-in from another origin: %d %s", resp.StatusCode, readBody(t, resp))
	} else {
		_ = readBody(t, resp)
	}
	// A form post (no script) is redirected, the token in no URL.
	form, _ := http.NewRequest(http.MethodPost, s.url+"/console/api/session", strings.NewReader("token=wrong"))
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(form)
	if err != nil {
		t.Fatal(err)
	}
	_ = readBody(t, resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?signin=refused" {
		t.Fatalf("a refused form sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	resp = signIn(t, s.url, viewer, nil)
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"user":"system:serviceaccount:`+ns+`:viewer"`) {
		t.Fatalf("the viewer's sign-in: %d %s", resp.StatusCode, body)
	}
	raw := resp.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "Secure", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(raw, attr) {
			t.Fatalf("Set-Cookie %q lacks %s", raw, attr)
		}
	}
	ck := sessionCookie(t, resp)
	if strings.Contains(ck.Value, viewer) || strings.Contains(ck.Value, strings.Split(viewer, ".")[1]) {
		t.Fatal("the session cookie carries the token")
	}
	cookie := http.Header{"Cookie": {ck.Name + "=" + ck.Value}}

	req, _ := http.NewRequest(http.MethodGet, s.url+"/console/api/session", nil)
	req.Header = cookie.Clone()
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var who struct {
		SignedIn bool   `json:"signed_in"`
		CSRF     string `json:"csrf"`
	}
	if err := json.Unmarshal([]byte(readBody(t, resp)), &who); err != nil || !who.SignedIn || who.CSRF == "" {
		t.Fatalf("the session: %+v %v", who, err)
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, code := readSSE(t, sctx, s.url+gateway.StreamPath, cookie); code != http.StatusOK {
		t.Fatalf("the health stream with the viewer's session: %d", code)
	}
	if _, code := readSSE(t, sctx, s.url+gateway.StreamPath, nil); code != http.StatusUnauthorized {
		t.Fatalf("the health stream without a session: %d", code)
	}
	// The runs stream wants watch on the runs themselves, which the viewer lacks.
	if _, code := readSSE(t, sctx, s.url+gateway.RunsStreamPath, cookie); code != http.StatusForbidden {
		t.Fatalf("the runs stream for a user who may not watch runs: %d", code)
	}
	// A cookie signed with another key is no session.
	forged := http.Header{"Cookie": {ck.Name + "=" + mustCookie(t, session.Random(time.Hour))}}
	if _, code := readSSE(t, sctx, s.url+gateway.StreamPath, forged); code != http.StatusUnauthorized {
		t.Fatalf("the health stream with a session another key signed: %d", code)
	}
}

func mustCookie(t *testing.T, k *session.Keys) string {
	t.Helper()
	anon, _ := k.Start(nil, "", time.Time{})
	v, err := k.Encode(anon)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// login signs sa in and returns its cookie header and CSRF token.
func login(t *testing.T, s site, token string) (http.Header, string) {
	t.Helper()
	resp := signIn(t, s.url, token, nil)
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, body)
	}
	var who struct {
		CSRF string `json:"csrf"`
	}
	_ = json.Unmarshal([]byte(body), &who)
	ck := sessionCookie(t, resp)
	return http.Header{"Cookie": {ck.Name + "=" + ck.Value}}, who.CSRF
}

func do(t *testing.T, method, url string, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readBody(t, resp)
}

// Cancel: the user's own permission to patch the run decides (asked of the API server), and a
// request without the session's CSRF token, or from another origin, is refused, whoever sends it.
func TestCancelNeedsTheUsersPatchPermissionAndTheCSRFToken(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "console-cancel")
	s := startSite(t, ns, access.Token)
	newRun(t, ns, "long")
	reader, err := env.ServiceAccountToken(ctx, ns, "reader")
	if err != nil {
		t.Fatal(err)
	}
	operator, err := env.ServiceAccountToken(ctx, ns, "operator")
	if err != nil {
		t.Fatal(err)
	}
	grant(t, env.Client, ns, "reader", append([]rbacv1.PolicyRule{statusViewer}, runReader...)...)
	grant(t, env.Client, ns, "operator", append(append([]rbacv1.PolicyRule{statusViewer}, runReader...), runPatcher...)...)
	testRun := func() bool {
		var ar agentsv1alpha1.AgentRun
		rc, _ := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
		if err := rc.Get().Namespace(ns).Resource("agentruns").Name("long").Do(ctx).Into(&ar); err != nil {
			t.Fatal(err)
		}
		return ar.Spec.Cancel
	}
	// The cache must hold the run before its page can be read.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := s.src.AgentRun("long"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never reached the console's cache")
		}
	}
	detail := s.url + "/console/api/runs/AgentRun/long"
	cancelURL := detail + "/cancel"

	rh, rcsrf := login(t, s, reader)
	if code, body := do(t, http.MethodGet, detail, rh); code != http.StatusOK || !strings.Contains(body, `"can_cancel":false`) {
		t.Fatalf("the reader's view of the run: %d %s", code, body)
	}
	rh.Set(CSRFHeader, rcsrf)
	if code, body := do(t, http.MethodPost, cancelURL, rh); code != http.StatusForbidden || !strings.Contains(body, "may not patch agentruns") {
		t.Fatalf("the reader's cancel: %d %s", code, body)
	}
	if testRun() {
		t.Fatal("the reader's refused cancel was written")
	}

	oh, ocsrf := login(t, s, operator)
	if code, body := do(t, http.MethodGet, detail, oh); code != http.StatusOK || !strings.Contains(body, `"can_cancel":true`) {
		t.Fatalf("the operator's view of the run: %d %s", code, body)
	}
	forged := map[string]http.Header{
		"without the CSRF token":    oh.Clone(),
		"with the reader's token":   withHeader(oh, CSRFHeader, rcsrf),
		"from another origin":       withHeader(withHeader(oh, CSRFHeader, ocsrf), "Origin", "https://evil.example"),
		"from another site (fetch)": withHeader(withHeader(oh, CSRFHeader, ocsrf), "Sec-Fetch-Site", "cross-site"),
	}
	for name, h := range forged {
		if code, body := do(t, http.MethodPost, cancelURL, h); code != http.StatusForbidden || !strings.Contains(body, "refused") {
			t.Fatalf("a cancel %s: %d %s", name, code, body)
		}
	}
	if testRun() {
		t.Fatal("a forged cancel was written")
	}
	if code, body := do(t, http.MethodPost, cancelURL, withHeader(oh, CSRFHeader, ocsrf)); code != http.StatusAccepted {
		t.Fatalf("the operator's cancel: %d %s", code, body)
	}
	if !testRun() {
		t.Fatal("the operator's cancel did not set spec.cancel")
	}
	if code, _ := do(t, http.MethodPost, s.url+"/console/api/runs/AgentRun/nosuch/cancel", withHeader(oh, CSRFHeader, ocsrf)); code != http.StatusNotFound {
		t.Fatalf("cancelling a run that does not exist: %d", code)
	}
}

func withHeader(h http.Header, k, v string) http.Header {
	out := h.Clone()
	out.Set(k, v)
	return out
}

// The page: served with a Content-Security-Policy that allows no inline script or style, and it
// has none (no <script> without src, no style or on* attributes).
func TestThePageForbidsAndHasNoInlineScript(t *testing.T) {
	ns := namespace(t, "console-page")
	s := startSite(t, ns, access.None)
	resp, err := http.Get(s.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	page := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("CSP %q lacks %s", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Fatalf("CSP %q allows inline code", csp)
	}
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>`), regexp.MustCompile(`<script(?:\s(?:[^s>]|s[^r])*)?>`),
		regexp.MustCompile(`\sstyle=`), regexp.MustCompile(`\son[a-z]+=`), regexp.MustCompile(`<style`)} {
		if loc := bad.FindStringIndex(page); loc != nil {
			t.Fatalf("the page has inline code: %q", page[loc[0]:min(len(page), loc[1]+40)])
		}
	}
	for _, asset := range []string{"/console/app.js", "/console/app.css", "/console/favicon.svg", "/favicon.ico"} {
		resp, err := http.Get(s.url + asset)
		if err != nil {
			t.Fatal(err)
		}
		_ = readBody(t, resp)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
			t.Fatalf("GET %s: %d", asset, resp.StatusCode)
		}
	}
}

// TestARunsPageShowsOnlyWhatTheUserMayRead (#31 item 6): the gateway reads Events, Jobs and the
// Orchestration with its own rights, but a run's page shows each only to a user the API server
// lets list events, list jobs or get orchestrations; the others see the run and a note of what
// is not shown.
func TestARunsPageShowsOnlyWhatTheUserMayRead(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "console-reads")
	s := startSite(t, ns, access.Token)
	newRun(t, ns, "seen")
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "seen-job", Labels: map[string]string{agentsv1alpha1.LabelAgentRun: "seen"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "seen.1"}, Type: "Warning", Reason: "Forbidden",
		Message: "about the run", InvolvedObject: corev1.ObjectReference{Kind: "AgentRun", Namespace: ns, Name: "seen"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := s.src.AgentRun("seen"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never reached the console's cache")
		}
	}
	pageReader := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"list"}},
	}
	for _, u := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		sees  bool
	}{{"runs-only", append([]rbacv1.PolicyRule{statusViewer}, runReader...), false}, {"everything", append(append([]rbacv1.PolicyRule{statusViewer}, runReader...), pageReader...), true}} {
		token, err := env.ServiceAccountToken(ctx, ns, u.name)
		if err != nil {
			t.Fatal(err)
		}
		grant(t, env.Client, ns, u.name, u.rules...)
		waitGranted(t, ns, u.name)
		h, _ := login(t, s, token)
		code, body := do(t, http.MethodGet, s.url+"/console/api/runs/AgentRun/seen", h)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", u.name, code, body)
		}
		var d Detail
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		shown := len(d.Jobs) == 1 && len(d.Events) == 1
		notes := strings.Join(d.Problems, "; ")
		switch {
		case u.sees && (!shown || notes != ""):
			t.Errorf("%s: Jobs %v, Events %v, problems %q: want both shown", u.name, d.Jobs, d.Events, notes)
		case !u.sees && (len(d.Jobs)+len(d.Events) != 0 || !strings.Contains(notes, "may not list jobs") || !strings.Contains(notes, "may not list events")):
			t.Errorf("%s: Jobs %v, Events %v, problems %q: want neither, and a note of each", u.name, d.Jobs, d.Events, notes)
		}
	}
}

// TestAStreamEndsWhenItsSessionDoes (#31 item 5): a session ends no later than the token it was
// made from, and an open stream read with it ends when it does, at the next re-check; so does a
// stream whose session's key was rotated away.
func TestAStreamEndsWhenItsSessionDoes(t *testing.T) {
	siteRecheck = 200 * time.Millisecond
	defer func() { siteRecheck = time.Minute }()
	ctx := context.Background()
	ns := namespace(t, "console-session-end")
	s := startSite(t, ns, access.Token)
	token, err := env.ServiceAccountToken(ctx, ns, "short")
	if err != nil {
		t.Fatal(err)
	}
	grant(t, env.Client, ns, "short", append([]rbacv1.PolicyRule{statusViewer}, runReader...)...)
	waitGranted(t, ns, "short")
	u := &authnv1.UserInfo{Username: "system:serviceaccount:" + ns + ":short"}
	sess, err := s.keys.Start(u, token, time.Now().Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := s.keys.Cookie(sess)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	events, code := readSSE(t, sctx, s.url+gateway.RunsStreamPath, http.Header{"Cookie": {ck.String()}})
	if code != http.StatusOK {
		t.Fatalf("the stream refused the session: %d", code)
	}
	for range events { // until the stream ends
	}
	if took := time.Since(start); took < 2*time.Second || took > 10*time.Second {
		t.Errorf("the stream of a session ending in 3 s ended after %s", took.Round(100*time.Millisecond))
	}
	if sctx.Err() != nil {
		t.Fatal("the stream outlived its session")
	}
}

// waitGranted waits until the API server's RBAC, which learns of a new binding from an informer,
// lets the ServiceAccount sa watch the control plane's status.
func waitGranted(t *testing.T, ns, sa string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		sar, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":" + sa, ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: ns, Verb: "watch", Group: access.Group, Resource: "controlplane", Subresource: "status"}}}, metav1.CreateOptions{})
		if err == nil && sar.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's grant never took effect: %v", sa, err)
		}
	}
}

// TestASessionEndsWithItsServiceAccount (#31 item 5): a console session is its sign-in token,
// reviewed again at each check: once the ServiceAccount it was made for is deleted, its open
// stream ends saying why, and the console's API refuses it asking to sign in again, though the
// session's cookie has hours left and the RoleBinding naming the ServiceAccount stays.
func TestASessionEndsWithItsServiceAccount(t *testing.T) {
	siteRecheck, siteAllowTTL = 200*time.Millisecond, 200*time.Millisecond
	defer func() { siteRecheck, siteAllowTTL = time.Minute, 0 }()
	ctx := context.Background()
	ns := namespace(t, "console-session-sa")
	s := startSite(t, ns, access.Token)
	token, err := env.ServiceAccountToken(ctx, ns, "leaving")
	if err != nil {
		t.Fatal(err)
	}
	grant(t, env.Client, ns, "leaving", append([]rbacv1.PolicyRule{statusViewer}, runReader...)...)
	waitGranted(t, ns, "leaving")
	hdr, _ := login(t, s, token)
	if code, r := do(t, http.MethodGet, s.url+"/console/api/session", hdr); code != http.StatusOK || !strings.Contains(r, `"signed_in":true`) {
		t.Fatalf("after sign-in: %d %s", code, r)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	events, code := readSSE(t, sctx, s.url+gateway.RunsStreamPath, hdr)
	if code != http.StatusOK {
		t.Fatalf("the stream refused the session: %d", code)
	}
	<-events // the snapshot: the stream is open
	if err := env.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last sseEvent
	for ev := range events { // until the stream ends
		last = ev
	}
	if sctx.Err() != nil {
		t.Fatal("the stream outlived the session's ServiceAccount")
	}
	if last.typ != "error" || !strings.Contains(last.data.Message, "access ended") {
		t.Errorf("the stream ended with %s %q, want an error event saying access ended", last.typ, last.data.Message)
	}
	testenv.Eventually(t, 30*time.Second, "the console refuses the session", func() error {
		code, body := do(t, http.MethodGet, s.url+"/console/api/runs/AgentRun/none", hdr)
		if code != http.StatusUnauthorized || !strings.Contains(body, "sign in again") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if code, r := do(t, http.MethodGet, s.url+"/console/api/session", hdr); code != http.StatusOK || !strings.Contains(r, `"signed_in":false`) {
		t.Errorf("the session endpoint after the ServiceAccount's deletion: %d %s", code, r)
	}
}
