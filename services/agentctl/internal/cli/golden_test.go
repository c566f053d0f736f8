package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// golden compares got with testdata/verbs/NAME.golden (-update rewrites it, as output_test's).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "verbs", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./internal/cli -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

// TestGoldenRunVerbs (#35 item 6): what each run verb prints, in each output (table, wide, json,
// yaml, name, jsonpath, custom-columns), for fixed runs at a fixed time, with its exit code.
func TestGoldenRunVerbs(t *testing.T) {
	stopClock(t)
	f := world(t)
	kc := f.kubeconfig(t, "agents")
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"get-runs", []string{"get", "runs"}, ExitOK},
		{"get-runs-wide", []string{"get", "runs", "-o", "wide"}, ExitOK},
		{"get-runs-json", []string{"get", "runs", "-o", "json"}, ExitOK},
		{"get-runs-yaml", []string{"get", "runs", "-o", "yaml"}, ExitOK},
		{"get-runs-name", []string{"get", "runs", "-o", "name"}, ExitOK},
		{"get-orchestrationruns-no-headers", []string{"get", "or", "--no-headers"}, ExitOK},
		{"get-agentruns-selector-wide", []string{"get", "agentruns", "-l", "orchestration.proompteng.ai/run=diamond-1", "-o", "wide"}, ExitOK},
		{"get-all-namespaces", []string{"get", "runs", "-A"}, ExitOK},
		{"get-run-yaml", []string{"get", "run", "hello", "-o", "yaml"}, ExitOK},
		{"get-run-json", []string{"get", "run", "diamond-2", "-o", "json"}, ExitOK},
		{"get-run-jsonpath", []string{"get", "run", "diamond-2", "-o", "jsonpath={.spec.retryOf} {.status.phase}"}, ExitOK},
		{"get-runs-go-template", []string{"get", "runs", "-o", "go-template={{range .items}}{{.metadata.name}}={{.status.phase}} {{end}}"}, ExitOK},
		{"get-runs-custom-columns", []string{"get", "runs", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,RETRY-OF:.spec.retryOf"}, ExitOK},
		{"get-missing", []string{"get", "run", "nope"}, ExitRejected},
		{"describe-agentrun", []string{"describe", "run", "hello"}, ExitOK},
		{"describe-orchestrationrun", []string{"describe", "run", "diamond-1"}, ExitOK},
		{"describe-retry", []string{"describe", "run", "orchestrationrun/diamond-2"}, ExitOK},
		{"wait-succeeded", []string{"wait", "run", "hello"}, ExitOK},
		{"wait-for-phase", []string{"wait", "run", "hello", "--for", "phase=Succeeded"}, ExitOK},
		{"wait-failed", []string{"wait", "run", "fails"}, ExitRunFailed},
		{"wait-unreachable", []string{"wait", "run", "hello", "--for", "phase=Failed"}, ExitUnreachable},
		{"wait-condition", []string{"wait", "run", "diamond-1", "--for", "condition=Ready=False"}, ExitOK},
		{"logs-agentrun", []string{"logs", "run", "hello"}, ExitOK},
		{"logs-retry", []string{"logs", "run", "diamond-2"}, ExitOK},
		{"logs-step", []string{"logs", "run", "diamond-2", "--step", "review"}, ExitOK},
		{"logs-no-step", []string{"logs", "run", "diamond-2", "--step", "deploy"}, ExitRejected},
		{"logs-gone", []string{"logs", "run", "fails"}, ExitRejected},
		{"retry-dry-run-yaml", []string{"retry", "run", "diamond-1", "--dry-run=client", "-o", "yaml"}, ExitOK},
		{"retry-succeeded", []string{"retry", "run", "diamond-2"}, ExitRejected},
		{"retry-step", []string{"retry", "run", "diamond-1-implement"}, ExitRejected},
		{"resubmit-dry-run-yaml", []string{"resubmit", "run", "hello", "--name", "hello-again", "--dry-run=server", "-o", "yaml"}, ExitOK},
		{"submit-dry-run-json", []string{"submit", "agent/codex", "-p", "issue=7", "--label", "team=a", "--dry-run=client", "-o", "json"}, ExitOK},
		{"submit-missing-definition", []string{"submit", "orchestration/nope"}, ExitRejected},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Execute(context.Background(), append([]string{"--kubeconfig", kc}, c.args...), nil, &out, &errOut)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr %s", code, c.code, errOut.String())
			}
			got := out.String()
			if errOut.Len() > 0 {
				got += "--- stderr\n" + errOut.String()
			}
			golden(t, c.name, got)
		})
	}
}

// TestGoldenSubmitWatchProgress: what --watch prints as a run moves on, step by step.
func TestGoldenSubmitWatchProgress(t *testing.T) {
	or := &orchv1alpha1.OrchestrationRun{}
	or.Name, or.Namespace = "diamond-3", "agents"
	snap := func(phase, msg string, steps ...orchv1alpha1.StepStatus) *run {
		c := or.DeepCopy()
		c.Status.Phase, c.Status.Message, c.Status.StepStatuses = phase, msg, steps
		c.Status.StartedAt = at(0)
		if phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed {
			c.Status.FinishedAt = at(45 * time.Second)
		}
		return fromOrchestrationRun(c)
	}
	pending := func(n string) orchv1alpha1.StepStatus {
		return stepStatus(n, agentsv1alpha1.PhasePending, "", -1, -1, "")
	}
	states := []*run{
		snap("", "", pending("plan"), pending("implement")),
		snap(agentsv1alpha1.PhaseRunning, "", stepStatus("plan", agentsv1alpha1.PhaseRunning, "", 0, -1, "diamond-3-plan"), pending("implement")),
		snap(agentsv1alpha1.PhaseRunning, "", stepStatus("plan", agentsv1alpha1.PhaseSucceeded, "", 0, 15*time.Second, "diamond-3-plan"),
			stepStatus("implement", agentsv1alpha1.PhaseRunning, "", 15*time.Second, -1, "diamond-3-implement")),
		snap(agentsv1alpha1.PhaseFailed, "step implement Failed", stepStatus("plan", agentsv1alpha1.PhaseSucceeded, "", 0, 15*time.Second, "diamond-3-plan"),
			stepStatus("implement", agentsv1alpha1.PhaseFailed, "Job failed:\nBackoffLimitExceeded", 15*time.Second, 45*time.Second, "diamond-3-implement")),
	}
	var b strings.Builder
	var prev *run
	for i, cur := range states {
		for _, l := range progressLines(prev, cur, t0.Add(time.Duration(i)*15*time.Second)) {
			b.WriteString(l + "\n")
		}
		prev = cur
	}
	golden(t, "submit-watch-progress", b.String())
}

// TestGoldenGetWatch: get --watch prints the list, then a row for each change (no second header),
// and exits 6 when the API server ends the watch, saying to run it again.
func TestGoldenGetWatch(t *testing.T) {
	stopClock(t)
	f := world(t)
	running := agentRun("next", agentsv1alpha1.PhaseRunning, "", 50*time.Minute, 0)
	running.Status.FinishedAt = nil
	done := running.DeepCopy()
	done.Status.Phase, done.Status.Message, done.Status.FinishedAt = agentsv1alpha1.PhaseSucceeded, "the Job completed", at(50*time.Minute+20*time.Second)
	var evs []watchEvent
	for _, e := range []struct {
		typ string
		obj *agentsv1alpha1.AgentRun
	}{{"ADDED", running}, {"MODIFIED", done}} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e.obj)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, watchEvent{Type: e.typ, Object: u})
	}
	f.watches = map[string][]watchEvent{"agentruns": evs}
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), []string{"--kubeconfig", f.kubeconfig(t, "agents"), "get", "agentruns", "-l", "agents.proompteng.ai/agent=codex", "--watch"}, nil, &out, &errOut)
	if code != ExitUnavailable {
		t.Errorf("exit %d, want %d (the watch ended); stderr %s", code, ExitUnavailable, errOut.String())
	}
	golden(t, "get-agentruns-watch", out.String()+"--- stderr\n"+errOut.String())
}
