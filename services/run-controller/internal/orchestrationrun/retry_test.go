package orchestrationrun

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// A retry's decisions as a table: which steps it takes from the run it retries, which it runs,
// and which retries it refuses.
func TestARetryRunsOnlyTheStepsThatDidNotSucceed(t *testing.T) {
	// a -> b -> c, and d on its own
	steps := []orchv1alpha1.OrchestrationStep{
		{Name: "a", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}},
		{Name: "b", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}, DependsOn: []string{"a"}},
		{Name: "c", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}, DependsOn: []string{"b"}},
		{Name: "d", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}},
	}
	orch := &orchv1alpha1.Orchestration{ObjectMeta: metav1.ObjectMeta{Name: "o"}, Spec: orchv1alpha1.OrchestrationSpec{Steps: steps}}
	order, err := topoOrder(steps)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name, phase string, stepPhases map[string]string) *orchv1alpha1.OrchestrationRun {
		or := &orchv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "o"}}}
		or.Status.Phase = phase
		for _, s := range steps {
			ph, ok := stepPhases[s.Name]
			if !ok {
				continue
			}
			or.Status.StepStatuses = append(or.Status.StepStatuses, orchv1alpha1.StepStatus{Name: s.Name, Kind: "AgentRun", Phase: ph,
				ResourceRef: &orchv1alpha1.ResourceRef{Kind: "AgentRun", Name: childName(or, s.Name)}})
		}
		return or
	}
	failedFirst := run("first", agentsv1alpha1.PhaseFailed, map[string]string{
		"a": agentsv1alpha1.PhaseSucceeded, "b": agentsv1alpha1.PhaseFailed, "c": agentsv1alpha1.PhasePending, "d": agentsv1alpha1.PhaseSucceeded})
	retry := func(name, of string) *orchv1alpha1.OrchestrationRun {
		r := run(name, "", nil)
		r.Spec.RetryOf = of
		return r
	}
	for _, tc := range []struct {
		name     string
		or       *orchv1alpha1.OrchestrationRun
		original *orchv1alpha1.OrchestrationRun
		children map[string]string // step -> the phase of the retry's own AgentRun for it
		taken    string            // steps taken from the original, comma-separated, with the AgentRuns they point at
		next     string            // steps the retry starts now
		problem  string            // a part of why the retry cannot run
	}{
		{name: "not a retry: every step is the run's own", or: run("plain", "", nil), next: "a,d"},
		{name: "a failed run: its succeeded steps are taken, the failed one runs again and what waited on it after",
			or: retry("second", "first"), original: failedFirst, taken: "a=first-a,d=first-d", next: "b"},
		{name: "a retry of a retry points at the AgentRun that first ran each step",
			or: retry("third", "second"), original: func() *orchv1alpha1.OrchestrationRun {
				second := run("second", agentsv1alpha1.PhaseFailed, map[string]string{"b": agentsv1alpha1.PhaseSucceeded, "c": agentsv1alpha1.PhaseFailed})
				second.Status.StepStatuses = append(second.Status.StepStatuses,
					orchv1alpha1.StepStatus{Name: "a", Kind: "AgentRun", Phase: agentsv1alpha1.PhaseSucceeded, ResourceRef: &orchv1alpha1.ResourceRef{Name: "first-a"}})
				return second
			}(), taken: "a=first-a,b=second-b", next: "d,c"},
		{name: "a cancelled run: what it cancelled runs again",
			or: retry("second", "first"), original: run("first", agentsv1alpha1.PhaseCancelled, map[string]string{"a": agentsv1alpha1.PhaseCancelled}), next: "a,d"},
		{name: "the original is gone before the retry wrote its status: refused",
			or: retry("second", "first"), problem: "OrchestrationRun first not found in namespace ns"},
		{name: "the original is gone after the retry recorded what it took: it carries on",
			or: func() *orchv1alpha1.OrchestrationRun {
				r := retry("second", "first")
				r.Status.StepStatuses = []orchv1alpha1.StepStatus{
					{Name: "a", Phase: agentsv1alpha1.PhaseSucceeded, ResourceRef: &orchv1alpha1.ResourceRef{Name: "first-a"}},
					{Name: "b", Phase: agentsv1alpha1.PhaseSucceeded, ResourceRef: &orchv1alpha1.ResourceRef{Name: "second-b"}},
					{Name: "c", Phase: agentsv1alpha1.PhasePending},
				}
				return r
			}(), children: map[string]string{"b": agentsv1alpha1.PhaseSucceeded}, taken: "a=first-a", next: "d,c"},
		{name: "a run still running is refused", or: retry("second", "first"), original: run("first", agentsv1alpha1.PhaseRunning, nil), problem: "has not finished (Running)"},
		{name: "a run with no status yet is refused", or: retry("second", "first"), original: run("first", "", nil), problem: "has not finished (Pending)"},
		{name: "a run of another Orchestration is refused", or: retry("second", "first"), original: func() *orchv1alpha1.OrchestrationRun {
			o := run("first", agentsv1alpha1.PhaseFailed, nil)
			o.Spec.OrchestrationRef.Name = "other"
			return o
		}(), problem: "runs Orchestration other, this run o"},
		{name: "a run retrying itself is refused", or: retry("second", "second"), original: run("second", agentsv1alpha1.PhaseFailed, nil), problem: "names this run itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reused, problem := retried(tc.or, tc.original, orch)
			if tc.problem != "" || problem != "" {
				if tc.problem == "" || !strings.Contains(problem, tc.problem) {
					t.Fatalf("problem %q, want one with %q", problem, tc.problem)
				}
				return
			}
			var taken []string
			for _, s := range order {
				if st, ok := reused[s.Name]; ok {
					taken = append(taken, s.Name+"="+st.ResourceRef.Name)
				}
			}
			if got := strings.Join(taken, ","); got != tc.taken {
				t.Errorf("taken %q, want %q", got, tc.taken)
			}
			p := progress{children: map[string]*agentsv1alpha1.AgentRun{}, reused: reused}
			for step, phase := range tc.children {
				p.children[step] = &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: childName(tc.or, step)}, Status: agentsv1alpha1.AgentRunStatus{Phase: phase}}
			}
			var next []string
			for _, s := range nextSteps(order, p, failedSteps(order, p)) {
				next = append(next, s.Name)
			}
			if got := strings.Join(next, ","); got != tc.next {
				t.Errorf("next steps %q, want %q", got, tc.next)
			}
			st := orchestrationStatus(orch, p, nil)
			for _, s := range st.steps {
				if _, ok := reused[s.Name]; ok && (s.Phase != agentsv1alpha1.PhaseSucceeded || !strings.Contains(s.Message, "not run again by this retry") && tc.original != nil) {
					t.Errorf("taken step %s: %s %q, want Succeeded, saying the retry did not run it", s.Name, s.Phase, s.Message)
				}
			}
		})
	}
}

// A retry of a run whose every step succeeded has nothing to run: it is Succeeded at once.
func TestARetryOfASucceededRunSucceedsWithoutRunningAStep(t *testing.T) {
	steps := []orchv1alpha1.OrchestrationStep{{Name: "a", Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "x"}}}
	orch := &orchv1alpha1.Orchestration{Spec: orchv1alpha1.OrchestrationSpec{Steps: steps}}
	first := &orchv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "o"}},
		Status: orchv1alpha1.OrchestrationRunStatus{Phase: agentsv1alpha1.PhaseSucceeded, StepStatuses: []orchv1alpha1.StepStatus{
			{Name: "a", Phase: agentsv1alpha1.PhaseSucceeded, ResourceRef: &orchv1alpha1.ResourceRef{Name: "first-a"}}}}}
	second := &orchv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Name: "second"}, Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "o"}, RetryOf: "first"}}
	reused, problem := retried(second, first, orch)
	if problem != "" {
		t.Fatal(problem)
	}
	p := progress{children: map[string]*agentsv1alpha1.AgentRun{}, reused: reused}
	if next := nextSteps(steps, p, nil); len(next) != 0 {
		t.Errorf("%d steps start, want none", len(next))
	}
	if st := orchestrationStatus(orch, p, nil); st.phase != agentsv1alpha1.PhaseSucceeded {
		t.Errorf("phase %s, want Succeeded", st.phase)
	}
}
