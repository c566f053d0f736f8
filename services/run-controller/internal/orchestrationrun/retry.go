package orchestrationrun

import (
	"fmt"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// retried is what a retry (spec.retryOf) takes from the run it retries, original (nil when it is
// not in the cache): each step of the Orchestration that succeeded there, as that run's status
// recorded it (its AgentRun and times; for a retry of a retry, the AgentRun that first ran it),
// which therefore does not run again. Once the retry has written its own status, the steps it
// recorded as taken are what it took, so it carries on if the original is deleted meanwhile.
//
// The second result, when not empty, is why the retry cannot run: it names itself, a run of
// another Orchestration, a run that has not finished, or a run that does not exist.
func retried(or, original *orchv1alpha1.OrchestrationRun, orch *orchv1alpha1.Orchestration) (map[string]orchv1alpha1.StepStatus, string) {
	from := or.Spec.RetryOf
	if from == "" {
		return nil, ""
	}
	steps := map[string]bool{}
	for _, s := range orch.Spec.Steps {
		steps[s.Name] = true
	}
	if original == nil {
		if len(or.Status.StepStatuses) == 0 {
			return nil, fmt.Sprintf("spec.retryOf: OrchestrationRun %s not found in namespace %s: a retry takes the steps that "+
				"succeeded from the run it retries, which must exist when the retry starts; create a new run without spec.retryOf "+
				"to run every step", from, or.Namespace)
		}
		taken := map[string]orchv1alpha1.StepStatus{}
		for _, s := range or.Status.StepStatuses {
			if steps[s.Name] && s.Phase == agentsv1alpha1.PhaseSucceeded && s.ResourceRef != nil && s.ResourceRef.Name != childName(or, s.Name) {
				taken[s.Name] = s
			}
		}
		return taken, ""
	}
	switch {
	case original.Name == or.Name:
		return nil, "spec.retryOf names this run itself: name the finished run to retry"
	case original.Spec.OrchestrationRef.Name != or.Spec.OrchestrationRef.Name:
		return nil, fmt.Sprintf("spec.retryOf: OrchestrationRun %s runs Orchestration %s, this run %s: a retry runs the same Orchestration",
			from, original.Spec.OrchestrationRef.Name, or.Spec.OrchestrationRef.Name)
	case !core.IsTerminal(original.Status.Phase):
		phase := original.Status.Phase
		if phase == "" {
			phase = agentsv1alpha1.PhasePending
		}
		return nil, fmt.Sprintf("spec.retryOf: OrchestrationRun %s has not finished (%s): retry it once it has", from, phase)
	}
	taken := map[string]orchv1alpha1.StepStatus{}
	for _, s := range original.Status.StepStatuses {
		if !steps[s.Name] || s.Phase != agentsv1alpha1.PhaseSucceeded {
			continue
		}
		s.Message = fmt.Sprintf("succeeded in OrchestrationRun %s: not run again by this retry", from)
		taken[s.Name] = s
	}
	return taken, ""
}
