//go:build integration

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/testenv"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
)

// grantRules binds a Role with rules to a ServiceAccount of default.
func grantRules(t *testing.T, kc kubernetes.Interface, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "archive-" + sa}, Rules: rules}
	if _, err := kc.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "default"}}}
	if _, err := kc.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// archiveAccess is the wiring's: the rights of live runs, asked of the real API server.
func archiveAccess(kc kubernetes.Interface) ArchiveAccess {
	o := access.ReviewerOptions{}
	return ArchiveAccess{
		Kinds: map[string]Authorizer{
			"AgentRun":         access.NewResourceReviewer(kc, "default", "agents.proompteng.ai", "agentruns", o),
			"OrchestrationRun": access.NewResourceReviewer(kc, "default", "orchestration.proompteng.ai", "orchestrationruns", o),
		},
		Parts: map[string]Authorizer{
			ArchiveEvents: access.NewResourceReviewer(kc, "default", "", "events", o),
			ArchiveJobs:   access.NewResourceReviewer(kc, "default", "batch", "jobs", o),
			ArchiveLogs:   access.NewSubresourceReviewer(kc, "default", "", "pods", "log", o),
		},
		Check: true,
	}
}

type archiveStack struct {
	pg     *testenv.Postgres
	store  *archive.Store
	url    string
	client jangarv1.AgentctlServiceClient
}

// startArchiveStack archives three runs (two in default, one in team-b) in a PostgreSQL of its
// own and serves them from a gateway of namespace default over HTTP and gRPC.
func startArchiveStack(t *testing.T, acc ArchiveAccess) archiveStack {
	t.Helper()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	ctx := context.Background()
	store, err := archive.Open(ctx, archive.Config{URL: pg.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	exit := int32(3)
	st := archiveStack{pg: pg, store: store}
	for _, r := range []archive.Record{
		{Summary: archive.Summary{UID: "uid-hello", Kind: "AgentRun", Namespace: "default", Name: "hello", Agent: "codex", Phase: "Failed",
			CreatedAt: base, FinishedAt: base.Add(time.Minute)},
			Object: json.RawMessage(`{"kind":"AgentRun","metadata":{"name":"hello"},"status":{"phase":"Failed","reason":"BackoffLimitExceeded"}}`),
			Events: []archive.Event{{Type: "Warning", Reason: "JobFailed", Message: "the step exited 3", First: base, Last: base.Add(time.Minute)}},
			Jobs:   []archive.JobOutcome{{Name: "hello-1", ExitCode: &exit, Reason: "BackoffLimitExceeded"}},
			Logs:   []archive.StepLog{{Pod: "hello-1-abc", Container: "agent", Tail: "the last line\n"}}},
		{Summary: archive.Summary{UID: "uid-plan", Kind: "OrchestrationRun", Namespace: "default", Name: "plan", Phase: "Succeeded",
			CreatedAt: base, FinishedAt: base.Add(2 * time.Minute)}, Object: json.RawMessage(`{"kind":"OrchestrationRun"}`)},
		{Summary: archive.Summary{UID: "uid-team-b", Kind: "AgentRun", Namespace: "team-b", Name: "elsewhere", Phase: "Succeeded",
			CreatedAt: base, FinishedAt: base.Add(3 * time.Minute)}, Object: json.RawMessage(`{}`)},
	} {
		if err := store.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	gw := NewGateway(health.NewHub(64, 64), "default", 30*time.Second, 100, nil)
	gw.ServeArchive(store, "default", acc)
	mux := http.NewServeMux()
	mux.Handle("GET "+ArchivePath, gw.ArchiveHandler())
	mux.Handle("GET "+ArchivePath+"/", gw.ArchiveHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	st.url = srv.URL + ArchivePath
	st.client = serveGRPC(t, gw)
	return st
}

// serveGRPC serves gw's AgentctlService on a loopback port until the test ends and returns a
// client of it.
func serveGRPC(t *testing.T, gw *Gateway) jangarv1.AgentctlServiceClient {
	t.Helper()
	gs := grpcx.NewServer(prometheus.NewRegistry())
	jangarv1.RegisterAgentctlServiceServer(gs.Server, gw)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	conn, err := grpcx.Dial(l.Addr().String(), grpcx.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return jangarv1.NewAgentctlServiceClient(conn)
}

// getJSON GETs url with token and decodes a 200 into m; it returns the status and the body.
func getJSON(t *testing.T, url, token string, m proto.Message) (int, string) {
	t.Helper()
	resp := get(t, url, token)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && m != nil {
		if err := protojson.Unmarshal(b, m); err != nil {
			t.Fatalf("%s: %v\n%s", url, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

func names(l *jangarv1.ArchivedRunList) string {
	var out []string
	for _, r := range l.GetRuns() {
		out = append(out, r.GetKind()+"/"+r.GetName())
	}
	return strings.Join(out, ",")
}

func TestArchivedRunsAreReadWithTheRightsOfLiveRuns(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	full := serviceAccountToken(t, kc, "archive-full")
	agentRunsOnly := serviceAccountToken(t, kc, "archive-agentruns")
	stranger := serviceAccountToken(t, kc, "archive-stranger")
	grantRules(t, kc, "archive-full",
		rbacv1.PolicyRule{APIGroups: []string{"agents.proompteng.ai"}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"orchestration.proompteng.ai"}, Resources: []string{"orchestrationruns"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"list"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}})
	grantRules(t, kc, "archive-agentruns",
		rbacv1.PolicyRule{APIGroups: []string{"agents.proompteng.ai"}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list"}})
	st := startArchiveStack(t, archiveAccess(kc))

	t.Run("a list shows the kinds the caller may list, of the gateway's namespace only", func(t *testing.T) {
		var l jangarv1.ArchivedRunList
		if code, body := getJSON(t, st.url, full, &l); code != http.StatusOK || names(&l) != "OrchestrationRun/plan,AgentRun/hello" || len(l.GetHidden()) != 0 {
			t.Fatalf("full rights: %d %s (%s)", code, names(&l), body)
		}
		l = jangarv1.ArchivedRunList{}
		if code, body := getJSON(t, st.url, agentRunsOnly, &l); code != http.StatusOK || names(&l) != "AgentRun/hello" ||
			len(l.GetHidden()) != 1 || !strings.Contains(l.GetHidden()[0], "may not list orchestrationruns in default") {
			t.Fatalf("agentruns only: %d %s hidden %q (%s)", code, names(&l), l.GetHidden(), body)
		}
		if code, body := getJSON(t, st.url+"?kind=OrchestrationRun", agentRunsOnly, nil); code != http.StatusForbidden || !strings.Contains(body, "orchestrationruns") {
			t.Fatalf("agentruns only, asking for OrchestrationRuns: %d %s", code, body)
		}
		if code, body := getJSON(t, st.url, stranger, nil); code != http.StatusForbidden || !strings.Contains(body, "archive-stranger") {
			t.Fatalf("no rights: %d %s", code, body)
		}
		if code, _ := getJSON(t, st.url, "", nil); code != http.StatusUnauthorized {
			t.Fatalf("no token: %d", code)
		}
		if code, body := getJSON(t, st.url+"?namespace=team-b", full, nil); code != http.StatusBadRequest || !strings.Contains(body, `namespace "default", not "team-b"`) {
			t.Fatalf("another namespace: %d %s", code, body)
		}
	})

	t.Run("one run shows its Events, Jobs and logs only to who may read them live", func(t *testing.T) {
		var r jangarv1.ArchivedRun
		if code, body := getJSON(t, st.url+"/uid-hello", full, &r); code != http.StatusOK || len(r.GetEvents()) != 1 || len(r.GetJobs()) != 1 ||
			r.GetJobs()[0].GetExitCode() != 3 || len(r.GetLogs()) != 1 || r.GetLogs()[0].GetTail() != "the last line\n" || len(r.GetHidden()) != 0 ||
			r.GetObject().GetFields()["status"].GetStructValue().GetFields()["reason"].GetStringValue() != "BackoffLimitExceeded" {
			t.Fatalf("full rights: %d %s", code, body)
		}
		r = jangarv1.ArchivedRun{}
		code, body := getJSON(t, st.url+"/AgentRun/hello", agentRunsOnly, &r)
		if code != http.StatusOK || r.GetSummary().GetUid() != "uid-hello" || len(r.GetEvents())+len(r.GetJobs())+len(r.GetLogs()) != 0 || len(r.GetHidden()) != 3 {
			t.Fatalf("agentruns only: %d %s", code, body)
		}
		for i, want := range []string{"may not list events", "may not list jobs", "may not get pods/log"} {
			if !strings.Contains(r.GetHidden()[i], want) {
				t.Errorf("hidden[%d] = %q, want it to say %q", i, r.GetHidden()[i], want)
			}
		}
		if code, body := getJSON(t, st.url+"/uid-plan", agentRunsOnly, nil); code != http.StatusForbidden {
			t.Fatalf("an OrchestrationRun for a user without its rights: %d %s", code, body)
		}
		if code, body := getJSON(t, st.url+"/uid-team-b", full, nil); code != http.StatusNotFound || strings.Contains(body, "elsewhere") {
			t.Fatalf("a run of another namespace: %d %s", code, body)
		}
		if code, body := getJSON(t, st.url+"/AgentRun/nope", full, nil); code != http.StatusNotFound || !strings.Contains(body, "no archived run AgentRun/nope in namespace default") {
			t.Fatalf("no such run: %d %s", code, body)
		}
		if code, _ := getJSON(t, st.url+"/AgentRun/nope", stranger, nil); code != http.StatusForbidden {
			t.Fatalf("a stranger learns whether a name is archived: %d", code)
		}
		for _, uid := range []string{"uid-hello", "no-such-uid"} {
			if code, _ := getJSON(t, st.url+"/"+uid, stranger, nil); code != http.StatusForbidden {
				t.Fatalf("a stranger asking for uid %s: %d, want 403 whether or not it is archived", uid, code)
			}
			if code, _ := getJSON(t, st.url+"/"+uid, "", nil); code != http.StatusUnauthorized {
				t.Fatalf("no token asking for uid %s: %d, want 401 whether or not it is archived", uid, code)
			}
		}
	})

	t.Run("over gRPC with the same answers", func(t *testing.T) {
		with := func(token string) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			t.Cleanup(cancel)
			return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		l, err := st.client.ListArchivedRuns(with(agentRunsOnly), &jangarv1.ListArchivedRunsRequest{})
		if err != nil || names(l) != "AgentRun/hello" || len(l.GetHidden()) != 1 {
			t.Fatalf("agentruns only: %s %v", names(l), err)
		}
		if _, err := st.client.ListArchivedRuns(with(stranger), &jangarv1.ListArchivedRunsRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("no rights: %v", err)
		}
		if _, err := st.client.ListArchivedRuns(context.Background(), &jangarv1.ListArchivedRunsRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("no token: %v", err)
		}
		r, err := st.client.GetArchivedRun(with(full), &jangarv1.GetArchivedRunRequest{Kind: "agentrun", Name: "hello"})
		if err != nil || r.GetSummary().GetUid() != "uid-hello" || len(r.GetLogs()) != 1 {
			t.Fatalf("full rights by name: %v %v", r, err)
		}
		if _, err := st.client.GetArchivedRun(with(full), &jangarv1.GetArchivedRunRequest{Uid: "uid-team-b"}); status.Code(err) != codes.NotFound {
			t.Fatalf("another namespace's run: %v", err)
		}
	})

	t.Run("filters and pages, and bad input is refused with what to do", func(t *testing.T) {
		var l jangarv1.ArchivedRunList
		if code, body := getJSON(t, st.url+"?phase=Failed&agent=codex", full, &l); code != http.StatusOK || names(&l) != "AgentRun/hello" {
			t.Fatalf("phase and agent: %d %s", code, body)
		}
		l = jangarv1.ArchivedRunList{}
		if code, body := getJSON(t, st.url+"?until=2026-11-01T12:01:30Z", full, &l); code != http.StatusOK || names(&l) != "AgentRun/hello" {
			t.Fatalf("until: %d %s", code, body)
		}
		var first, second jangarv1.ArchivedRunList
		getJSON(t, st.url+"?limit=1", full, &first)
		if names(&first) != "OrchestrationRun/plan" || first.GetNextCursor() == "" {
			t.Fatalf("first page: %s next %q", names(&first), first.GetNextCursor())
		}
		getJSON(t, st.url+"?limit=1&cursor="+first.GetNextCursor(), full, &second)
		if names(&second) != "AgentRun/hello" || second.GetNextCursor() != "" {
			t.Fatalf("second page: %s next %q", names(&second), second.GetNextCursor())
		}
		for _, c := range []struct{ query, says string }{
			{"?cursor=bogus", "start again without it"},
			{"?phase=Failed&cursor=" + first.GetNextCursor(), "belongs to a list with other filters"},
			{"?kind=Pod", "must be AgentRun or OrchestrationRun"},
			{"?limit=5000", "from 1 to 1000"},
			{"?since=yesterday", "RFC 3339 time"},
			{"?since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z", "since must be before until"},
		} {
			if code, body := getJSON(t, st.url+c.query, full, nil); code != http.StatusBadRequest || !strings.Contains(body, c.says) {
				t.Errorf("%s: %d %q, want 400 saying %q", c.query, code, body, c.says)
			}
		}
	})

	t.Run("the database away is 503 and retried; back, reads answer again", func(t *testing.T) {
		if err := st.pg.Stop(); err != nil {
			t.Fatal(err)
		}
		resp := get(t, st.url, full)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "retry shortly") ||
			strings.Contains(string(body), st.pg.Password) {
			t.Fatalf("the database stopped: %d %q (Retry-After %q)", resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
		if _, err := st.client.ListArchivedRuns(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+full),
			&jangarv1.ListArchivedRunsRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("gRPC with the database stopped: %v", err)
		}
		if err := st.pg.Start(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "reads answer again", func() error {
			var l jangarv1.ArchivedRunList
			if code, body := getJSON(t, st.url, full, &l); code != http.StatusOK || len(l.GetRuns()) != 2 {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
	})
}

func TestArchivedRunsWithoutAccessChecksAreOpenAsTheStreamsAre(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	acc := archiveAccess(kc)
	acc.Check = false
	st := startArchiveStack(t, acc)
	var r jangarv1.ArchivedRun
	if code, body := getJSON(t, st.url+"/uid-hello", "", &r); code != http.StatusOK || len(r.GetLogs()) != 1 || len(r.GetHidden()) != 0 {
		t.Fatalf("none mode: %d %s", code, body)
	}
}
