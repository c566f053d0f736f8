// Package job is job-gc's reconciler of Jobs: the result before the deletion (seed 002).
//
// run-controller puts the agents.proompteng.ai/job-result finalizer on every Job it creates, so
// that neither the TTL controller, nor `kubectl delete job`, nor a cascading delete can remove a
// Job before its outcome is in the AgentRun's status. Reconcile releases the finalizer once it
// is: when the run is finished (terminal phase and finishedAt), or when the workflow step that
// ran the Job has recorded that Job (by UID) as Succeeded or Failed; and when the run that owned
// the Job no longer exists (confirmed by a live GET, never from the cache alone). A finished or
// deleted Job still held after HoldWarning raises a JobResultHeld Warning.
//
// The pure decisions (Recorded, Terminal, FinishedAt, Owner) are also the agentrun package's;
// the informers, queues and metrics registration are the wiring package's.
package job

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
)

// Why a hold was released (the metric's label).
const (
	ReleasedRecorded  = "result-recorded"
	ReleasedOwnerGone = "owner-gone"
)

// ByRun is the name of the Job informers' index by the key ("<namespace>/<name>") of the
// AgentRun that controls the Job.
const ByRun = "run"

// Reconciler holds and releases the job-result finalizer of the Jobs of run-controller. Its
// fields are set once, before the controller runs; the informer maps may be filled until then.
type Reconciler struct {
	// Jobs and Runs are the informers of run-controller's Jobs and of AgentRuns, by namespace.
	Jobs, Runs map[string]cache.SharedIndexInformer
	// Client is the generated clientset of the agentplane API groups (the live GET of a run).
	Client versioned.Interface
	// Kube releases the finalizer.
	Kube kubernetes.Interface
	// Events receives the JobResultHeld Warning.
	Events eventclient.Emitter
	// Now is the clock.
	Now func() time.Time
	// HoldWarning is how long a finished or deleted Job may be held before the Warning.
	HoldWarning time.Duration
	// Queue is the Job queue: Reconcile looks again (AddAfter) when a hold becomes overdue.
	Queue *controller.Queue
	// Released counts the holds released, by why (ReleasedRecorded, ReleasedOwnerGone).
	Released *prometheus.CounterVec
	// Archived, when archiving is on, reports whether the run is in the run archive: a recorded
	// result's hold is released only then, so that the archive can read the Job and its pods.
	Archived func(*agentsv1alpha1.AgentRun) bool

	mu       sync.Mutex
	warned   map[types.UID]bool  // Jobs a JobResultHeld Warning was raised for
	released *utilcache.Expiring // Jobs this process released, each for releasedFor
}

// releasedFor is how long a Job this process released is not released again while the cache
// still shows its hold: the cache's copy may lag the release by a moment, and a second release
// made from it only fails (its JSON patch tests a finalizer that is no longer there).
const releasedFor = 30 * time.Second

// Reconcile releases the hold of the Job named by key ("<namespace>/<name>") once its run has
// recorded its outcome or is gone, and warns once of a hold that has lasted past HoldWarning.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	obj, ok, _ := r.Jobs[ns].GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	j := obj.(*batchv1.Job)
	if jobresult.Index(j) < 0 || r.releasedLately(j.UID) {
		return nil
	}
	ref := Owner(j)
	if ref == nil {
		return r.release(ctx, j, ReleasedOwnerGone)
	}
	var run *agentsv1alpha1.AgentRun
	if o, ok, _ := r.Runs[ns].GetStore().GetByKey(ns + "/" + ref.Name); ok {
		run = o.(*agentsv1alpha1.AgentRun)
	}
	if run == nil || run.UID != ref.UID {
		// The cache may lag; only the API server can say the run is gone.
		live, err := r.Client.AgentsV1alpha1().AgentRuns(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && live.UID != ref.UID):
			return r.release(ctx, j, ReleasedOwnerGone)
		case err != nil:
			return fmt.Errorf("get AgentRun %s/%s: %w", ns, ref.Name, err)
		}
		run = live
	}
	if Recorded(run, j.UID) {
		if r.Archived != nil && !r.Archived(run) {
			return nil // the run archive captures the Job and its pods first; it queues the Job again then
		}
		return r.release(ctx, j, ReleasedRecorded)
	}
	// Held on purpose; but a finished or deleted Job whose result stays unrecorded for long
	// means something upstream is stuck, and an operator should hear of it.
	since := holdSince(j)
	if since.IsZero() {
		return nil
	}
	if wait := r.HoldWarning - r.Now().Sub(since); wait > 0 {
		r.Queue.AddAfter(key, wait)
		return nil
	}
	r.mu.Lock()
	if r.warned == nil {
		r.warned = map[types.UID]bool{}
	}
	first := !r.warned[j.UID]
	r.warned[j.UID] = true
	r.mu.Unlock()
	if first {
		msg := fmt.Sprintf("Job %s has kept its result for %s: AgentRun %s (phase %q) has not recorded its outcome; run-controller must record it, "+
			"or see docs/architecture.md (job-gc) to release the hold by hand", j.Name, r.Now().Sub(since).Round(time.Second), run.Name, run.Status.Phase)
		logging.FromContext(ctx).Warn("job-result hold overdue", "job", key, "run", run.Name, "since", since)
		eventclient.Notify(ctx, r.Events, "batch/v1", "Job", j, corev1.EventTypeWarning, reasons.JobResultHeld, "Hold", msg)
	}
	return nil
}

// Forget drops what Reconcile remembers of the Job with uid (whether it was warned of, whether
// it was released), once the Job is deleted.
func (r *Reconciler) Forget(uid types.UID) {
	r.mu.Lock()
	delete(r.warned, uid)
	r.mu.Unlock()
	r.releasedRecord().Delete(uid)
}

// releasedLately reports whether this process released the hold of the Job with uid less than
// releasedFor ago.
func (r *Reconciler) releasedLately(uid types.UID) bool {
	_, ok := r.releasedRecord().Get(uid)
	return ok
}

// releasedRecord is the record of the Jobs this process released, made on first use (on the
// clock Now).
func (r *Reconciler) releasedRecord() *utilcache.Expiring {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released == nil {
		r.released = controller.NewExpiring(r.Now)
	}
	return r.released
}

// Owner is the AgentRun that controls the Job, or nil.
func Owner(j *batchv1.Job) *metav1.OwnerReference {
	return controller.ControllerOf(j.OwnerReferences, "AgentRun")
}

// FinishedAt is when the Job completed or failed, or zero while it runs.
func FinishedAt(j *batchv1.Job) time.Time {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			if j.Status.CompletionTime != nil {
				return j.Status.CompletionTime.Time
			}
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// holdSince is when a hold started to keep something: the Job finished or its deletion was
// asked for, whichever came first; zero while the Job runs and nobody deletes it.
func holdSince(j *batchv1.Job) time.Time {
	t := FinishedAt(j)
	if d := j.DeletionTimestamp; d != nil && (t.IsZero() || d.Time.Before(t)) {
		t = d.Time
	}
	return t
}

// Recorded reports whether the run's status holds the outcome of the Job with uid: the run is
// finished (terminal phase and finishedAt), or the workflow step that ran it says Succeeded or
// Failed with that Job.
func Recorded(run *agentsv1alpha1.AgentRun, uid types.UID) bool {
	s := run.Status
	if Terminal(s.Phase) && s.FinishedAt != nil {
		return true
	}
	if s.Workflow != nil {
		for _, st := range s.Workflow.Steps {
			if st.JobRef != nil && st.JobRef.UID == string(uid) &&
				(st.Phase == agentsv1alpha1.PhaseSucceeded || st.Phase == agentsv1alpha1.PhaseFailed) {
				return true
			}
		}
	}
	return false
}

// Terminal reports whether an AgentRun phase is final: Succeeded, Failed or Cancelled.
func Terminal(phase string) bool {
	return phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed || phase == agentsv1alpha1.PhaseCancelled
}

// release removes the finalizer with a JSON patch that first tests it is still where it was,
// so a concurrent change to the list is never overwritten.
func (r *Reconciler) release(ctx context.Context, j *batchv1.Job, why string) error {
	patch, err := jobresult.ReleasePatch(j)
	if err != nil {
		return nil
	}
	_, err = r.Kube.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "agentplane-job-gc"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		r.releasedRecord().Set(j.UID, true, releasedFor)
	}
	if apierrors.IsInvalid(err) {
		// The patch's test failed: the finalizer list changed since the cache saw it (the TTL
		// controller's foreground deletion adds one). The retry reads the newer Job.
		return fmt.Errorf("release Job %s/%s: its finalizers changed since they were read; retrying with the newer Job", j.Namespace, j.Name)
	}
	if err != nil {
		return fmt.Errorf("release Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	r.Released.WithLabelValues(why).Inc()
	logging.FromContext(ctx).Info("released job-result hold", "job", j.Namespace+"/"+j.Name, "why", why)
	return nil
}

// HoldStats are the holds in the cache at one moment.
type HoldStats struct {
	// Held is the number of Jobs that carry the finalizer; Overdue, of those finished or deleted
	// and held past HoldWarning.
	Held, Overdue int
	// Oldest is the age of the oldest hold on a finished or deleted Job (0 when there is none).
	Oldest time.Duration
}

// Holds counts, from the cache, the Jobs that carry the finalizer, those finished or deleted
// and held past HoldWarning, and the age of the oldest such hold.
func (r *Reconciler) Holds() HoldStats {
	var s HoldStats
	now := r.Now()
	for _, inf := range r.Jobs {
		for _, o := range inf.GetStore().List() {
			j := o.(*batchv1.Job)
			if jobresult.Index(j) < 0 {
				continue
			}
			s.Held++
			if since := holdSince(j); !since.IsZero() {
				age := now.Sub(since)
				s.Oldest = max(s.Oldest, age)
				if age >= r.HoldWarning {
					s.Overdue++
				}
			}
		}
	}
	return s
}

// Retention is how long a finished run is kept: its spec.ttlSecondsAfterFinished when set, else
// def; and how long from now until that has passed after finishedAt (0 or less: delete it now).
func Retention(finishedAt time.Time, ttlSeconds *int32, def time.Duration, now time.Time) (ttl, wait time.Duration) {
	ttl = def
	if ttlSeconds != nil {
		ttl = time.Duration(*ttlSeconds) * time.Second
	}
	return ttl, finishedAt.Add(ttl).Sub(now)
}

// DeleteRun deletes an AgentRun at the end of a retention (its own, or its OrchestrationRun's):
// first the Jobs it controls (their pods follow through the garbage collector), so that none
// outlives it even where no garbage collector runs, then the run; background propagation, UID
// preconditions, each deletion counted in deletions by kind. An object already gone or replaced
// is skipped. jobs is the namespace's Job informer, indexed by ByRun.
func DeleteRun(ctx context.Context, kube kubernetes.Interface, client versioned.Interface, jobs cache.SharedIndexInformer,
	ar *agentsv1alpha1.AgentRun, deletions *prometheus.CounterVec) error {
	bg := metav1.DeletePropagationBackground
	deleted := func(kind string, err error) error {
		switch {
		case err == nil:
			deletions.WithLabelValues(kind).Inc()
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			return err
		}
		return nil
	}
	for _, j := range controller.ByIndex[*batchv1.Job](jobs, ByRun, ar.Namespace+"/"+ar.Name) {
		if ref := Owner(j); ref == nil || ref.UID != ar.UID || j.DeletionTimestamp != nil {
			continue
		}
		if err := deleted("Job", kube.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{
			PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &j.UID}})); err != nil {
			return fmt.Errorf("delete Job %s/%s: %w", j.Namespace, j.Name, err)
		}
	}
	if ar.DeletionTimestamp != nil {
		return nil
	}
	if err := deleted("AgentRun", client.AgentsV1alpha1().AgentRuns(ar.Namespace).Delete(ctx, ar.Name, metav1.DeleteOptions{
		PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &ar.UID}})); err != nil {
		return fmt.Errorf("delete AgentRun %s/%s: %w", ar.Namespace, ar.Name, err)
	}
	return nil
}
