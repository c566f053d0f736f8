package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

func TestWaitForIsReadAsKubectlsOrRefusedWithTheForm(t *testing.T) {
	for in, want := range map[string]string{
		"": "its end", "phase=succeeded": "phase=Succeeded", "PHASE=Failed": "phase=Failed",
		"condition=Ready": "condition=Ready=True", "condition=Ready=False": "condition=Ready=False",
	} {
		w, err := parseFor(in)
		if err != nil || w.String() != want {
			t.Errorf("--for %q: %v %v, want %s", in, w, err, want)
		}
	}
	for in, says := range map[string]string{
		"phase=Done": "a run's phase is one of", "condition=": "name the condition", "delete": "want phase=PHASE or condition=TYPE",
	} {
		if _, err := parseFor(in); exitCode(err) != ExitUsage || !strings.Contains(err.Error(), says) {
			t.Errorf("--for %q: %v (exit %d), want exit 2 saying %q", in, err, exitCode(err), says)
		}
	}
}

func TestConfirmReleasesOnlyOnY(t *testing.T) {
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, " y \n": true, "n\n": false, "\n": false, "": false, "yy\n": false} {
		var errOut bytes.Buffer
		if got := confirm(strings.NewReader(in), &errOut, "Release?"); got != want || !strings.HasPrefix(errOut.String(), "Release? [y/N] ") {
			t.Errorf("answer %q: %v (asked %q), want %v", in, got, errOut.String(), want)
		}
	}
}

// TestReleaseHoldsListsAsksAndDryRuns (#35 item 4): release-holds lists the held Jobs, releases
// nothing unless answered y (or given --yes), and --dry-run=client sends nothing while
// --dry-run=server sends each release as a server-side dry run. (The release itself, against a
// real API server, is e2e TestJobResultFinalizer's release-holds part on make up.)
func TestReleaseHoldsListsAsksAndDryRuns(t *testing.T) {
	held := runJob("hello-job-held", map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController,
		agentsv1alpha1.LabelAgentRun: "hello"}, 0, true)
	held.Finalizers = []string{agentsv1alpha1.FinalizerJobResult}
	path := "/apis/batch/v1/namespaces/agents/jobs/hello-job-held"
	for _, c := range []struct {
		args    []string
		stdin   string
		code    int
		says    []string
		patches []string
	}{
		{[]string{"--dry-run=maybe"}, "", ExitUsage, []string{"want none, client or server"}, nil},
		{nil, "n\n", ExitError, []string{"hello-job-held", "Release the job-result hold on these 1 Job(s)? [y/N]", "nothing released (answer y to release, or give --yes)"}, nil},
		{nil, "", ExitError, []string{"(no answer)", "nothing released"}, nil},
		{[]string{"--dry-run=client"}, "", ExitOK, []string{"hello-job-held", "1 job-result hold(s) would be released (dry run: client)"}, nil},
		{[]string{"--dry-run=server"}, "", ExitOK, []string{"would release (dry run: server) job/hello-job-held -n agents"}, []string{path + "?dryRun=All"}},
		{nil, "y\n", ExitOK, []string{"released job/hello-job-held -n agents", "1 job-result hold(s) released"}, []string{path + "?dryRun="}},
		{[]string{"--yes"}, "", ExitOK, []string{"1 job-result hold(s) released"}, []string{path + "?dryRun="}},
	} {
		f := newFakeAPI(t, held)
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), append([]string{"--kubeconfig", f.kubeconfig(t, "agents"), "jobs", "release-holds"}, c.args...), strings.NewReader(c.stdin), &out, &errOut)
		all := out.String() + errOut.String()
		if code != c.code {
			t.Errorf("%v answered %q: exit %d, want %d\n%s", c.args, c.stdin, code, c.code, all)
		}
		for _, s := range c.says {
			if !strings.Contains(all, s) {
				t.Errorf("%v answered %q: no %q in\n%s", c.args, c.stdin, s, all)
			}
		}
		if !slices.Equal(f.patches, c.patches) {
			t.Errorf("%v answered %q: patches %q, want %q", c.args, c.stdin, f.patches, c.patches)
		}
	}
}
