package agentrun

import (
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// GoneJobTTL is how long a deleted Job of a run that had not recorded it yet is remembered:
// the run's reconcile, which the deletion's event queues, records it well within.
const GoneJobTTL = 10 * time.Minute

// goneJobs remembers the Jobs of job-runtime runs deleted before their run recorded them in
// jobRef: the start claim says Starting, the pod had not run, and the jobRef waits for the
// jobRef delay. Without it the run's next reconcile finds neither a Job nor a jobRef, takes
// the run for one whose Job was never created, and creates a second.
type goneJobs struct {
	mu sync.Mutex
	m  map[string]goneJob // by namespace/Job name (the name holds the run's UID)
}

type goneJob struct {
	job *batchv1.Job
	at  time.Time
}

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
	now := c.Now()
	c.gone.mu.Lock()
	defer c.gone.mu.Unlock()
	for k, g := range c.gone.m {
		if now.Sub(g.at) >= GoneJobTTL {
			delete(c.gone.m, k)
		}
	}
	if c.gone.m == nil {
		c.gone.m = map[string]goneJob{}
	}
	c.gone.m[core.NsKey(j.Namespace, j.Name)] = goneJob{job: j, at: now}
}

// goneJob is the deleted Job ns/name that JobDeleted remembered less than GoneJobTTL ago.
func (c *Reconciler) goneJob(ns, name string) (*batchv1.Job, bool) {
	c.gone.mu.Lock()
	defer c.gone.mu.Unlock()
	g, ok := c.gone.m[core.NsKey(ns, name)]
	if !ok || c.Now().Sub(g.at) >= GoneJobTTL {
		return nil, false
	}
	return g.job, true
}

// forgetGoneJob drops the record of ns/name once its run has recorded it.
func (c *Reconciler) forgetGoneJob(ns, name string) {
	c.gone.mu.Lock()
	delete(c.gone.m, core.NsKey(ns, name))
	c.gone.mu.Unlock()
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
