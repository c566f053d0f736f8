package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

// archiveGateway answers the run archive's calls from a list of runs, as a gateway without access
// checks would; lists and gets are recorded.
type archiveGateway struct {
	gateway
	runs  []*jangarv1.ArchivedRun
	lists []*jangarv1.ListArchivedRunsRequest
	gets  []*jangarv1.GetArchivedRunRequest
}

func (g *archiveGateway) ListArchivedRuns(_ context.Context, req *jangarv1.ListArchivedRunsRequest) (*jangarv1.ArchivedRunList, error) {
	g.mu.Lock()
	g.lists = append(g.lists, req)
	g.mu.Unlock()
	if req.GetCursor() == "bad" {
		return nil, status.Error(codes.InvalidArgument, "the cursor is not one this archive gave out: start again without it")
	}
	out := &jangarv1.ArchivedRunList{Hidden: []string{"OrchestrationRuns are not listed: you may not list orchestrationruns in agents"}}
	for _, r := range g.runs {
		s := r.GetSummary()
		if (req.GetName() == "" || s.GetName() == req.GetName()) && (req.GetPhase() == "" || s.GetPhase() == req.GetPhase()) {
			out.Runs = append(out.Runs, s)
		}
	}
	if req.GetLimit() > 0 && len(out.Runs) > int(req.GetLimit()) {
		out.Runs, out.NextCursor = out.Runs[:req.GetLimit()], "next-page"
	}
	return out, nil
}

func (g *archiveGateway) GetArchivedRun(_ context.Context, req *jangarv1.GetArchivedRunRequest) (*jangarv1.ArchivedRun, error) {
	g.mu.Lock()
	g.gets = append(g.gets, req)
	g.mu.Unlock()
	for _, r := range g.runs {
		if r.GetSummary().GetUid() == req.GetUid() {
			return r, nil
		}
	}
	return nil, status.Error(codes.NotFound, "no archived run with uid "+req.GetUid()+" in namespace agents")
}

func archivedFixture() *archiveGateway {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	obj, _ := structpb.NewStruct(map[string]any{"status": map[string]any{"reason": "BackoffLimitExceeded", "message": "the step exited 3",
		"conditions": []any{map[string]any{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}}}})
	exit := int32(3)
	return &archiveGateway{runs: []*jangarv1.ArchivedRun{
		{Summary: &jangarv1.ArchivedRunSummary{Uid: "u-2", Kind: "AgentRun", Namespace: "agents", Name: "fails", Agent: "codex", Phase: "Failed",
			CreatedAt: timestamppb.New(at), FinishedAt: timestamppb.New(at.Add(90 * time.Second)), ArchivedAt: timestamppb.New(at.Add(91 * time.Second))},
			Object: obj,
			Jobs:   []*jangarv1.ArchivedJob{{Name: "fails-1", ExitCode: &exit, Reason: "BackoffLimitExceeded"}},
			Events: []*jangarv1.ArchivedEvent{{Type: "Warning", Reason: "JobFailed", Message: "the step exited 3", Last: timestamppb.New(at)}},
			Logs:   []*jangarv1.ArchivedLog{{Pod: "fails-1-x", Container: "agent", Tail: "line one\nline two\n", Truncated: true}},
			Hidden: []string{"logs not shown: you may not get pods/log in agents"}},
		{Summary: &jangarv1.ArchivedRunSummary{Uid: "u-1", Kind: "AgentRun", Namespace: "agents", Name: "hello", Phase: "Succeeded",
			CreatedAt: timestamppb.New(at), FinishedAt: timestamppb.New(at.Add(time.Minute)), ArchivedAt: timestamppb.New(at.Add(time.Minute))}},
	}}
}

func TestGetRunsArchivedListsFromTheGateway(t *testing.T) {
	g := archivedFixture()
	addr := serveGateway(t, g)
	code, out, errOut := agentctl(t, "get", "runs", "--archived", "--gateway", addr, "--phase", "Failed", "--since", "2026-11-01T00:00:00Z")
	if code != 0 || !strings.Contains(out, "agentrun/fails") || strings.Contains(out, "agentrun/hello") || !strings.Contains(out, "1m30s") ||
		!strings.Contains(errOut, "may not list orchestrationruns") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if req := g.lists[0]; req.GetPhase() != "Failed" || !req.GetFinishedAfter().AsTime().Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) || req.GetKind() != "" {
		t.Fatalf("the request: %v", req)
	}
	code, out, errOut = agentctl(t, "get", "agentruns", "--archived", "--gateway", addr, "--limit", "1")
	if code != 0 || strings.Count(out, "agentrun/") != 1 || !strings.Contains(errOut, "--continue next-page") || g.lists[1].GetKind() != "AgentRun" {
		t.Fatalf("a page: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = agentctl(t, "get", "runs", "--archived", "--gateway", addr, "-o", "json")
	if code != 0 || !strings.Contains(out, `"uid": "u-2"`) {
		t.Fatalf("-o json: exit %d\n%s", code, out)
	}
	code, _, errOut = agentctl(t, "get", "runs", "--archived", "--gateway", addr, "--continue", "bad")
	if code != ExitRejected || !strings.Contains(errOut, "start again without it") {
		t.Fatalf("a bad cursor: exit %d %s", code, errOut)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"get", "runs", "--archived", "--watch"}, "--watch reads the cluster"},
		{[]string{"get", "runs", "--archived", "-o", "custom-columns=N:.name"}, "-o is wide, json, yaml or name"},
		{[]string{"get", "runs", "--archived", "--since", "last week"}, "RFC 3339 time"},
		{[]string{"get", "runs", "--phase", "Failed"}, "--phase is for --archived"},
		{[]string{"describe", "run", "x", "--uid", "u-1"}, "--uid is for --archived"},
	} {
		code, _, errOut := agentctl(t, append(c.args, "--gateway", addr)...)
		if code != ExitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: exit %d %q, want %d saying %q", c.args, code, errOut, ExitUsage, c.says)
		}
	}
}

func TestDescribeRunArchivedShowsWhatWasKept(t *testing.T) {
	g := archivedFixture()
	addr := serveGateway(t, g)
	code, out, errOut := agentctl(t, "describe", "run", "fails", "--archived", "--gateway", addr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"Name:", "fails", "Reason:", "BackoffLimitExceeded", "Duration:", "1m30s", "Conditions:", "Failed", "Jobs:", "fails-1",
		"Events:", "JobFailed", "Log of fails-1-x/agent (its tail):", "  line two", "Not shown: logs not shown: you may not get pods/log"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	if g.lists[0].GetName() != "fails" || g.gets[0].GetUid() != "u-2" {
		t.Fatalf("looked up %v then %v", g.lists[0], g.gets[0])
	}
	code, _, errOut = agentctl(t, "describe", "run", "nope", "--archived", "--gateway", addr)
	if code != ExitRejected || !strings.Contains(errOut, "no archived run nope") {
		t.Fatalf("no such run: exit %d %s", code, errOut)
	}
	code, _, errOut = agentctl(t, "describe", "run", "x", "--archived", "--uid", "u-9", "--gateway", addr)
	if code != ExitRejected || !strings.Contains(errOut, "NOT_FOUND") {
		t.Fatalf("no such uid: exit %d %s", code, errOut)
	}
}
