package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/reasons"
)

// CancelRefused reports whether a run's conditions say its cancel was refused because cancel
// support was off when cancel-propagator saw it (Cancelled=False, reason CancelDisabled). Such a
// cancel was never accepted: the run goes on as if it had not been asked, and stays refused when
// cancel support is turned back on (a cancel cannot be undone, so it cannot be asked again; delete
// the run to stop it).
func CancelRefused(conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, reasons.CondCancelled)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reasons.CancelDisabled
}

// CancelInEffect reports whether the control plane acts on the run's spec.cancel: it is set and
// was not refused (CancelRefused).
func (r *AgentRun) CancelInEffect() bool {
	return r.Spec.Cancel && !CancelRefused(r.Status.Conditions)
}
