//go:build integration

package wiring

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/gateway"
)

// grant gives the ServiceAccount name of default a Role with rules (none: the account only).
func grant(ctx context.Context, t *testing.T, name string, rules ...rbacv1.PolicyRule) *kubernetes.Clientset {
	t.Helper()
	token, err := env.ServiceAccountToken(ctx, "default", name) // the API server's audience: the gateway refuses it
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) > 0 {
		if _, err := env.Client.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

const aggBase = "/apis/" + gateway.APIGroup + "/" + gateway.APIVersion + "/namespaces/default/"

// TestTheAPIServerServesTheGatewayToTheUsersItAuthenticated registers the gateway's aggregated
// API with a real API server and calls it as users whose only credential is the API server's:
// the API server authenticates them, the gateway authorizes them (its own SubjectAccessReview),
// and the gateway believes the user headers only from the API server's front-proxy certificate.
func TestTheAPIServerServesTheGatewayToTheUsersItAuthenticated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ip, err := testenv.HostIP()
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ca := testenv.NewPKI(t, "gateway serving CA")
	certFile, keyFile := ca.ServerFiles("watch-gateway.default.svc")
	caPEM, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	// The default mode (none): the gateway's own ports take no credential, and listen on loopback
	// only; the aggregated API's port is authenticated by the API server whatever the mode.
	// With a run archive holding one AgentRun of default.
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	writer, err := archive.Open(ctx, archive.Config{URL: pg.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	at := time.Now().Add(-time.Hour).UTC()
	if err := writer.Put(ctx, archive.Record{Summary: archive.Summary{UID: "u-agg", Kind: "AgentRun", Namespace: "default", Name: "archived-hello",
		Phase: "Succeeded", CreatedAt: at, FinishedAt: at.Add(time.Minute)}, Object: json.RawMessage(`{}`),
		Events: []archive.Event{{Type: "Normal", Reason: "Succeeded", Message: "done", First: at, Last: at}}}); err != nil {
		t.Fatal(err)
	}
	run(t, map[string]string{"JANGAR_APISERVICE_ADDR": net.JoinHostPort(ip, fmt.Sprint(port)),
		"JANGAR_WATCH_TLS_CERT_FILE": certFile, "JANGAR_WATCH_TLS_KEY_FILE": keyFile,
		archive.EnvURL:      (&url.URL{Scheme: "postgres", User: url.User(pg.User), Host: pg.Addr, Path: "/postgres", RawQuery: "sslmode=disable"}).String(),
		archive.EnvPassword: pg.Password})
	if err := env.APIService(ctx, "default", "watch-gateway", gateway.APIGroup, gateway.APIVersion, caPEM, ip, port); err != nil {
		t.Fatal(err)
	}

	aggregated := rbacv1.PolicyRule{APIGroups: []string{gateway.APIGroup}, Resources: []string{"controlplanestatus", "controlplanestatushistory", "runs", "archivedruns"},
		Verbs: []string{"get", "list", "watch"}}
	viewer := grant(ctx, t, "agg-viewer", aggregated,
		rbacv1.PolicyRule{APIGroups: []string{"agents.proompteng.ai"}, Resources: []string{"controlplane/status"}, Verbs: []string{"get", "watch"}})
	// Let through by the API server (the aggregated resource), refused by the gateway.
	halfway := grant(ctx, t, "agg-halfway", aggregated)
	nobody := grant(ctx, t, "agg-nobody")

	get := func(kc *kubernetes.Clientset, resource string) ([]byte, error) {
		res := kc.CoreV1().RESTClient().Get().AbsPath(aggBase + resource).Do(ctx)
		if err := res.Error(); err != nil { // the Status's message, not client-go's generic one
			return nil, err
		}
		return res.Raw()
	}
	t.Run("a user allowed both the aggregated resource and the status reads it", func(t *testing.T) {
		raw, err := get(viewer, "controlplanestatus")
		if err != nil {
			t.Fatal(err)
		}
		var ev health.Event
		if err := json.Unmarshal(raw, &ev); err != nil || ev.Type != health.Snapshot || len(ev.Items) == 0 {
			t.Fatalf("status = %s (%v), want a snapshot with items", raw, err)
		}
		// The watch streams through the API server: the first event arrives while it stays open.
		body, err := viewer.CoreV1().RESTClient().Get().AbsPath(aggBase+"controlplanestatus").Param("watch", "true").Param("heartbeat", "1s").Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		sc := bufio.NewScanner(body)
		var seen []health.EventType
		for len(seen) < 2 && sc.Scan() {
			var ev health.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			seen = append(seen, ev.Type)
		}
		if len(seen) < 2 || seen[0] != health.Snapshot || seen[1] != health.Heartbeat {
			t.Fatalf("watch gave %v (%v), want a snapshot then a heartbeat", seen, sc.Err())
		}
	})
	t.Run("the gateway's refusal comes back as a Status naming what is missing", func(t *testing.T) {
		_, err := get(halfway, "controlplanestatus")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "controlplane/status") {
			t.Fatalf("err = %v, want Forbidden naming controlplane/status (the gateway's own check)", err)
		}
		_, err = get(viewer, "controlplanestatushistory")
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "keeps no status history") {
			t.Fatalf("history without Redis: %v, want NotFound saying the gateway keeps none", err)
		}
		// (as the admin: the API server lets anyone else no further than its Roles' namespace)
		err = env.Client.CoreV1().RESTClient().Get().AbsPath("/apis/" + gateway.APIGroup + "/" + gateway.APIVersion + "/namespaces/kube-system/controlplanestatus").Do(ctx).Error()
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "namespace default") {
			t.Fatalf("another namespace: %v, want NotFound naming the gateway's namespace", err)
		}
	})
	t.Run("the runs stream needs the right to watch the runs", func(t *testing.T) {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		err := viewer.CoreV1().RESTClient().Get().AbsPath(aggBase+"runs").Param("watch", "true").Do(rctx).Error()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "agentruns") {
			t.Fatalf("runs as a status viewer: %v, want Forbidden naming agentruns (the gateway's check)", err)
		}
	})
	t.Run("archived runs through the API server need the runs' own rights", func(t *testing.T) {
		if _, err := get(viewer, "archivedruns"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not list") {
			t.Fatalf("archived runs as a status viewer: %v, want Forbidden (the gateway's check of the runs)", err)
		}
		reader := grant(ctx, t, "agg-archive-reader", aggregated,
			rbacv1.PolicyRule{APIGroups: []string{"agents.proompteng.ai"}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list"}})
		raw, err := get(reader, "archivedruns")
		if err != nil || !strings.Contains(string(raw), `"name":"archived-hello"`) || !strings.Contains(string(raw), "may not list orchestrationruns") {
			t.Fatalf("archived runs as a reader of AgentRuns: %s %v", raw, err)
		}
		raw, err = get(reader, "archivedruns/u-agg")
		if err != nil || !strings.Contains(string(raw), `"uid":"u-agg"`) || strings.Contains(string(raw), `"reason":"Succeeded"`) ||
			!strings.Contains(string(raw), "events not shown: you may not list events in default") {
			t.Fatalf("an archived run as a reader without list events: %s %v", raw, err)
		}
		if _, err := get(nobody, "archivedruns"); !apierrors.IsForbidden(err) {
			t.Fatalf("archived runs without the aggregated resource: %v, want the API server's Forbidden", err)
		}
	})
	t.Run("the API server refuses a user without the aggregated resource", func(t *testing.T) {
		if _, err := get(nobody, "controlplanestatus"); !apierrors.IsForbidden(err) {
			t.Fatalf("err = %v, want Forbidden", err)
		}
	})

	// The gateway's port, called directly as an attacker on the network would.
	direct := func(cert *tls.Certificate, user, group string) (int, string) {
		cfg := &tls.Config{RootCAs: ca.CAPool, ServerName: "watch-gateway.default.svc"}
		if cert != nil { // sent even when its issuer is not one the server asks for
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s%scontrolplanestatus", net.JoinHostPort(ip, fmt.Sprint(port)), aggBase), nil)
		req.Header.Set("X-Remote-User", user)
		if group != "" {
			req.Header.Set("X-Remote-Group", group)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var st metav1.Status
		_ = json.NewDecoder(resp.Body).Decode(&st)
		return resp.StatusCode, st.Message
	}
	t.Run("user headers are believed only from the API server's front-proxy certificate", func(t *testing.T) {
		if code, msg := direct(nil, "system:admin", "system:masters"); code != http.StatusUnauthorized || !strings.Contains(msg, "Kubernetes API server only") {
			t.Errorf("no client certificate: %d %q, want 401", code, msg)
		}
		other, err := env.FrontProxy.Client("someone-else") // the right CA, not an allowed name
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := direct(&other, "system:admin", "system:masters"); code != http.StatusUnauthorized || !strings.Contains(msg, "requestheader-allowed-names") {
			t.Errorf("a front-proxy CA certificate for another name: %d %q, want 401", code, msg)
		}
		stranger := testenv.NewPKI(t, "some other CA").Client(testenv.FrontProxyClientName)
		if code, msg := direct(&stranger, "system:admin", "system:masters"); code != 0 || !strings.Contains(msg, "certificate") {
			t.Errorf("a certificate of another CA: %d %q, want the handshake refused", code, msg)
		}
		proxyCert, err := tls.LoadX509KeyPair(env.FrontProxy.CertFile, env.FrontProxy.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		// With the API server's own certificate the headers are believed, and then authorized.
		if code, msg := direct(&proxyCert, "system:serviceaccount:default:agg-nobody", ""); code != http.StatusForbidden || !strings.Contains(msg, "agg-nobody may not get") {
			t.Errorf("the front-proxy certificate for a user without the status: %d %q, want 403", code, msg)
		}
		if code, msg := direct(&proxyCert, "system:serviceaccount:default:agg-nobody", "system:masters"); code != http.StatusOK {
			t.Errorf("the front-proxy certificate for a member of system:masters: %d %q, want 200 (the groups are believed too)", code, msg)
		}
	})
}
