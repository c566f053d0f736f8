//go:build integration

package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
)

// serviceAccountToken creates a ServiceAccount in default and returns a token for it, issued by
// the real API server (TokenRequest).
func serviceAccountToken(t *testing.T, kc kubernetes.Interface, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kc.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// grantStatus binds a Role allowing get and watch of controlplane/status to a ServiceAccount.
func grantStatus(t *testing.T, kc kubernetes.Interface, sa string) (revoke func()) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "status-viewer-" + sa}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{access.Group}, Resources: []string{access.Resource + "/" + access.Subresource}, Verbs: []string{"get", "watch"},
	}}}
	if _, err := kc.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "default"}}}
	if _, err := kc.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := kc.RbacV1().RoleBindings("default").Delete(ctx, rb.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

type reviewCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *reviewCount) inc(kind string) { c.mu.Lock(); c.n[kind]++; c.mu.Unlock() }
func (c *reviewCount) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestTokenAccessOverSSE(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	viewer := serviceAccountToken(t, kc, "sse-viewer")
	stranger := serviceAccountToken(t, kc, "sse-stranger")
	revoke := grantStatus(t, kc, "sse-viewer")
	reviews := &reviewCount{n: map[string]int{}}
	// The decisions' cache runs on a fake clock: time passes for it only when the test says.
	clk := clocktesting.NewFakePassiveClock(time.Now())
	const ttl = 30 * time.Second
	st := startGatewayWith(t, nil, 30*time.Second, 100, func(g *Gateway) {
		g.RequireToken(access.NewReviewer(kc, "default", access.ReviewerOptions{OnReview: reviews.inc, AllowTTL: ttl, DenyTTL: ttl, Clock: clk}), 200*time.Millisecond)
	})

	for _, c := range []struct {
		name, token string
		code        int
		says        string
	}{
		{"no token", "", http.StatusUnauthorized, "bearer token is required"},
		{"not a token", "not-a-real-token", http.StatusUnauthorized, "not a JWT"},
		{"no grant", stranger, http.StatusForbidden, "system:serviceaccount:default:sse-stranger may not watch controlplane/status"},
	} {
		resp := get(t, st.url, c.token)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.says) {
			t.Fatalf("%s: %d %q, want %d saying %q", c.name, resp.StatusCode, body, c.code, c.says)
		}
		if c.token != "" && strings.Contains(string(body), c.token) {
			t.Fatalf("%s: the response echoes the token", c.name)
		}
		if c.code == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%s: WWW-Authenticate %q", c.name, resp.Header.Get("WWW-Authenticate"))
		}
	}

	// The granted token streams; a second stream at once reuses the cached decision.
	before := reviews.get("token")
	resp := get(t, st.url, viewer) //nolint:bodyclose // closed by the defer on the next line
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("granted token: %d", resp.StatusCode)
	}
	second := get(t, st.url, viewer)
	second.Body.Close()
	if second.StatusCode != http.StatusOK {
		t.Fatalf("granted token, second stream: %d", second.StatusCode)
	}
	if n := reviews.get("token") - before; n != 1 {
		t.Fatalf("%d TokenReviews for two streams within the cache TTL, want 1", n)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(prefix string) string {
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stream ended before %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %q line", prefix)
			}
		}
	}
	waitLine("event: snapshot")

	// Revoking the grant ends the open stream with an error event at the first re-check after
	// the cached decision expired. The cache's time moves on past its TTL until the stream
	// ends (the API server's authorizer may answer from before the revoke once more).
	revoke()
	moved := make(chan struct{})
	var mover sync.WaitGroup
	mover.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			clk.SetTime(clk.Now().Add(ttl + time.Second))
			select {
			case <-moved:
				return
			case <-tick.C:
			}
		}
	})
	defer func() { close(moved); mover.Wait() }()
	waitLine("event: error")
	if l := waitLine("data: "); !strings.Contains(l, "access ended") {
		t.Fatalf("error event %q, want it to say access ended", l)
	}
	select {
	case _, ok := <-lines:
		for ok {
			_, ok = <-lines
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream stayed open after access was revoked")
	}
}

func TestTokenAccessOverGRPC(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	viewer := serviceAccountToken(t, kc, "grpc-viewer")
	stranger := serviceAccountToken(t, kc, "grpc-stranger")
	grantStatus(t, kc, "grpc-viewer")
	st := startGatewayWith(t, nil, 30*time.Second, 100, func(g *Gateway) {
		g.RequireToken(access.NewReviewer(kc, "default", access.ReviewerOptions{}), time.Minute)
	})
	client := serveGRPC(t, st.gw)
	with := func(token string) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		if token == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	for _, c := range []struct {
		token string
		code  codes.Code
	}{{"", codes.Unauthenticated}, {"forged", codes.Unauthenticated}, {stranger, codes.PermissionDenied}, {viewer, codes.OK}} {
		_, err := client.GetControlPlaneStatus(with(c.token), &jangarv1.GetControlPlaneStatusRequest{})
		if status.Code(err) != c.code {
			t.Fatalf("GetControlPlaneStatus: %v, want %s", err, c.code)
		}
		stream, err := client.WatchControlPlaneStatus(with(c.token), &jangarv1.WatchControlPlaneStatusRequest{})
		if err == nil {
			var ev *jangarv1.ControlPlaneStatusEvent
			ev, err = stream.Recv()
			if err == nil && ev.GetType() != jangarv1.ControlPlaneStatusEvent_SNAPSHOT {
				t.Fatalf("first event %s, want SNAPSHOT", ev.GetType())
			}
		}
		if status.Code(err) != c.code {
			t.Fatalf("WatchControlPlaneStatus: %v, want %s", err, c.code)
		}
	}
}

// TestConcurrentChecksOfOneTokenShareOneReview: watchers reconnecting at once with the same
// token cost the API server one TokenReview and one access review, not one each.
func TestConcurrentChecksOfOneTokenShareOneReview(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	token := serviceAccountToken(t, kc, "herd")
	grantStatus(t, kc, "herd")
	reviews := &reviewCount{n: map[string]int{}}
	r := access.NewReviewer(kc, "default", access.ReviewerOptions{OnReview: reviews.inc})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Check(context.Background(), token, access.VerbWatch); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if reviews.get("token") != 1 || reviews.get("access") != 1 {
		t.Fatalf("%d TokenReviews and %d access reviews for 100 concurrent checks, want 1 and 1", reviews.get("token"), reviews.get("access"))
	}
}

// TestEachCallerHoldsAtMostItsShareOfWatches (#31 item 7), with tokens the real API server
// issued and reviews it answers: one user holds at most JANGAR_WATCH_MAX_STREAMS_PER_USER watches
// (429 naming the bound beyond it) while another user still gets in; a closed watch gives its
// slot back; one client address (not loopback) holds at most JANGAR_WATCH_MAX_STREAMS_PER_ADDRESS,
// whoever signs them.
func TestEachCallerHoldsAtMostItsShareOfWatches(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	alice := serviceAccountToken(t, kc, "cap-alice")
	bob := serviceAccountToken(t, kc, "cap-bob")
	grantStatus(t, kc, "cap-alice")
	grantStatus(t, kc, "cap-bob")
	st := startGatewayWith(t, nil, time.Second, 100, func(g *Gateway) {
		g.RequireToken(access.NewReviewer(kc, "default", access.ReviewerOptions{}), time.Minute)
		g.LimitPerCaller(2, 3)
	})
	// Another listener for the same gateway on every interface, reached at a non-loopback
	// address of this machine, so that its requests come from that address.
	ip := nonLoopbackIPv4(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+StreamPath, st.gw)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	remoteURL := "http://" + ln.Addr().String() + StreamPath

	// open starts a watch and returns its status code, the refusal's body, and how to close an
	// admitted stream (after its first line has arrived).
	open := func(url, token string) (int, string, func()) {
		t.Helper()
		resp := get(t, url, token)
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			return resp.StatusCode, string(body), func() {}
		}
		closeIt := func() { _ = resp.Body.Close() }
		t.Cleanup(closeIt)
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatalf("reading an admitted stream: %v", err)
		}
		return resp.StatusCode, "", closeIt
	}

	c1, _, closeFirst := open(st.url, alice)
	c2, _, _ := open(st.url, alice)
	if c1 != http.StatusOK || c2 != http.StatusOK {
		t.Fatalf("alice's first two watches: %d %d", c1, c2)
	}
	if code, body, _ := open(st.url, alice); code != http.StatusTooManyRequests || !strings.Contains(body, "JANGAR_WATCH_MAX_STREAMS_PER_USER") {
		t.Fatalf("alice's third watch: %d %q, want 429 naming the per-user bound", code, body)
	}
	if code, body, _ := open(st.url, bob); code != http.StatusOK {
		t.Fatalf("bob while alice is at her bound: %d %q", code, body)
	}
	// alice closes one; its slot comes back (the gateway notices at its next write, a heartbeat).
	closeFirst()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body, _ := open(st.url, alice)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice after closing a watch: still %d %q", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// From one non-loopback address: three watches in all (bob has one slot left, so use it and
	// then another user's), the fourth refused naming the address, whoever sends it.
	carol := serviceAccountToken(t, kc, "cap-carol")
	grantStatus(t, kc, "cap-carol")
	dave := serviceAccountToken(t, kc, "cap-dave")
	grantStatus(t, kc, "cap-dave")
	for i, tok := range []string{bob, carol, carol} {
		if code, body, _ := open(remoteURL, tok); code != http.StatusOK {
			t.Fatalf("watch %d from %s: %d %q", i+1, ip, code, body)
		}
	}
	if code, body, _ := open(remoteURL, dave); code != http.StatusTooManyRequests || !strings.Contains(body, "from "+ip) {
		t.Fatalf("a fourth watch from %s: %d %q, want 429 naming the address", ip, code, body)
	}
	// dave from loopback (not counted per address) still gets in.
	if code, body, _ := open(st.url, dave); code != http.StatusOK {
		t.Fatalf("dave from loopback: %d %q", code, body)
	}
}

// nonLoopbackIPv4 is an IPv4 address of this machine other than loopback (Docker's bridge, the
// machine's own network).
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Fatal("this machine has no IPv4 address but loopback: the per-address bound cannot be tried")
	return ""
}
