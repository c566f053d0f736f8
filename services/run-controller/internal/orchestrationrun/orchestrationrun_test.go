package orchestrationrun

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// The DAG's decisions as a table: which steps start now, and what the OrchestrationRun's
// status says, from the phases of the steps' AgentRuns.
func TestOrchestrationDecisions(t *testing.T) {
	// a -> b, a -> c, (b, c) -> d
	steps := []orchv1alpha1.OrchestrationStep{
		{Name: "a", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}},
		{Name: "b", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}, DependsOn: []string{"a"}},
		{Name: "c", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}, DependsOn: []string{"a"}},
		{Name: "d", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}, DependsOn: []string{"b", "c"}},
	}
	orch := &orchv1alpha1.Orchestration{ObjectMeta: metav1.ObjectMeta{Name: "o"}, Spec: orchv1alpha1.OrchestrationSpec{Steps: steps}}
	order, err := topoOrder(steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		phases map[string]string // step -> its AgentRun's phase ("-": exists with no status yet)
		next   string            // steps to start now, comma-separated
		phase  string            // the OrchestrationRun's phase
		msg    string            // a part of its message
	}{
		{name: "nothing started: only the root starts", phases: nil, next: "a", phase: agentsv1alpha1.PhasePending},
		{name: "root created, no status: nothing more starts", phases: map[string]string{"a": "-"}, next: "", phase: agentsv1alpha1.PhasePending},
		{name: "root running: its dependents wait", phases: map[string]string{"a": agentsv1alpha1.PhaseRunning}, next: "", phase: agentsv1alpha1.PhaseRunning},
		{name: "root succeeded: both branches start at once",
			phases: map[string]string{"a": agentsv1alpha1.PhaseSucceeded}, next: "b,c", phase: agentsv1alpha1.PhaseRunning},
		{name: "one branch done: the join waits for the other",
			phases: map[string]string{"a": agentsv1alpha1.PhaseSucceeded, "b": agentsv1alpha1.PhaseSucceeded, "c": agentsv1alpha1.PhaseRunning},
			next:   "", phase: agentsv1alpha1.PhaseRunning},
		{name: "both branches done: the join starts",
			phases: map[string]string{"a": agentsv1alpha1.PhaseSucceeded, "b": agentsv1alpha1.PhaseSucceeded, "c": agentsv1alpha1.PhaseSucceeded},
			next:   "d", phase: agentsv1alpha1.PhaseRunning},
		{name: "a failed branch fails the run and nothing more starts",
			phases: map[string]string{"a": agentsv1alpha1.PhaseSucceeded, "b": agentsv1alpha1.PhaseFailed, "c": agentsv1alpha1.PhaseSucceeded},
			next:   "", phase: agentsv1alpha1.PhaseFailed, msg: "step b (AgentRun o-b) failed"},
		{name: "a cancelled step counts as failed",
			phases: map[string]string{"a": agentsv1alpha1.PhaseCancelled}, next: "", phase: agentsv1alpha1.PhaseFailed, msg: "step a"},
		{name: "every step succeeded",
			phases: map[string]string{"a": agentsv1alpha1.PhaseSucceeded, "b": agentsv1alpha1.PhaseSucceeded, "c": agentsv1alpha1.PhaseSucceeded, "d": agentsv1alpha1.PhaseSucceeded},
			next:   "", phase: agentsv1alpha1.PhaseSucceeded, msg: "all 4 steps succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			children := map[string]*agentsv1alpha1.AgentRun{}
			for step, phase := range tc.phases {
				ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "o-" + step}}
				if phase != "-" {
					ar.Status.Phase = phase
				}
				children[step] = ar
			}
			p := progress{children: children}
			failed := failedSteps(order, p)
			var next []string
			for _, s := range nextSteps(order, p, failed) {
				next = append(next, s.Name)
			}
			if got := strings.Join(next, ","); got != tc.next {
				t.Errorf("next steps %q, want %q", got, tc.next)
			}
			st := orchestrationStatus(orch, p, failed)
			if st.phase != tc.phase || !strings.Contains(st.message, tc.msg) {
				t.Errorf("status %s %q, want %s with %q", st.phase, st.message, tc.phase, tc.msg)
			}
			if len(st.steps) != len(steps) {
				t.Errorf("%d step statuses, want %d", len(st.steps), len(steps))
			}
		})
	}
}
