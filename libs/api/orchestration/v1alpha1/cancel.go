package v1alpha1

import agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"

// CancelInEffect reports whether the control plane acts on the run's spec.cancel: it is set and
// was not refused because cancel support was off (agentsv1alpha1.CancelRefused).
func (r *OrchestrationRun) CancelInEffect() bool {
	return r.Spec.Cancel && !agentsv1alpha1.CancelRefused(r.Status.Conditions)
}
