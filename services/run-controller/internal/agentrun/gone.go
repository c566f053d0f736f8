package agentrun

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// GoneJobTTL is how long a deleted Job of a run that had not recorded it yet is remembered:
// the run's reconcile, which the deletion's event queues, records it well within.
const GoneJobTTL = 10 * time.Minute

// JobDeleted is told of every deleted Job: the job-runtime Job of a run that is not finished
// and has no jobRef in the cache is remembered (GoneJobTTL), so that the run records it
// (and job-gc reports it missing) instead of getting a second Job.
func (c *Reconciler) JobDeleted(j *batchv1.Job) {
	ref := core.ControllerOf(j.OwnerReferences, "AgentRun")
	if ref == nil {
		return
	}
	ar, ok := c.Run(j.Namespace, ref.Name)
	if !ok || ar.UID != ref.UID || ar.Spec.Runtime.Type != agentsv1alpha1.RuntimeJob || ar.Status.JobRef != nil ||
		core.IsTerminal(ar.Status.Phase) || j.Name != JobName(ar, "", 1) {
		return
	}
	c.gone.Set(core.NsKey(j.Namespace, j.Name), j, GoneJobTTL)
}

// goneJob is the deleted Job ns/name that JobDeleted remembered less than GoneJobTTL ago.
func (c *Reconciler) goneJob(ns, name string) (*batchv1.Job, bool) {
	v, ok := c.gone.Get(core.NsKey(ns, name))
	if !ok {
		return nil, false
	}
	return v.(*batchv1.Job), true
}

// goneJobStatus is the status of a run whose Job was deleted before the run recorded it: what
// the Job said last (Succeeded or Failed if it had finished), else Pending with the jobRef,
// which job-gc reads to report the Job missing (WorkflowJobMissing).
func goneJobStatus(j *batchv1.Job) runStatus {
	st := jobRunStatus(j, func(*batchv1.Job) bool { return false })
	if st.phase == agentsv1alpha1.PhasePending {
		st.message = "Job " + j.Name + " was deleted before its pod was seen running; no second Job is created (job-gc reports it missing)"
	}
	return st
}
