// Package agentrun is job-gc's reconciler of AgentRuns: retention and missing Jobs (seed 002).
//
//   - Retention: a finished AgentRun is deleted, with its Jobs, spec.ttlSecondsAfterFinished (or
//     Retention) after finishedAt. Runs owned by an OrchestrationRun go with it instead, unless
//     it is gone (an orphan, left by a deletion without a garbage collector or by an earlier
//     version): then their own retention applies.
//   - Missing Jobs: a non-terminal run whose recorded Job is gone, or is being deleted before it
//     finished, (confirmed by a live GET) gets JobMissing=True, a WorkflowJobMissing Warning and
//     a count; still missing after MissingGrace, the run fails with reason WorkflowJobMissing. A
//     run being cancelled, or a step of an OrchestrationRun being cancelled, is not reported.
//
// The Job decisions it shares (Terminal, FinishedAt, Owner, the ByRun index) are the job
// package's; the informers, queues and metrics registration are the wiring package's.
package agentrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
	"github.com/agentplane/agentplane/services/job-gc/internal/archiver"
	"github.com/agentplane/agentplane/services/job-gc/internal/job"
)

// CondJobMissing is the AgentRun condition job-gc sets when the run's Job is gone before its
// outcome was recorded (reason WorkflowJobMissing), and clears (reason JobFound) if it is back.
const CondJobMissing = reasons.CondJobMissing

// Reconciler deletes finished AgentRuns after their retention and reports (then fails) those
// missing their Job. Its fields are set once, before the controller runs; the informer maps may
// be filled until then.
type Reconciler struct {
	// Jobs, Runs and OrchRuns are the informers of run-controller's Jobs (indexed by job.ByRun),
	// of AgentRuns and of OrchestrationRuns, by namespace.
	Jobs, Runs, OrchRuns map[string]cache.SharedIndexInformer
	// Client is the generated clientset of the agentplane API groups.
	Client versioned.Interface
	// Kube reads and deletes Jobs.
	Kube kubernetes.Interface
	// Status writes the run's status; Events receives the WorkflowJobMissing Warning.
	Status statusclient.Writer
	Events eventclient.Emitter
	// Now is the clock.
	Now func() time.Time
	// Retention is how long a finished run without spec.ttlSecondsAfterFinished is kept;
	// MissingGrace, how long a run is reported missing its Job before it fails.
	Retention, MissingGrace time.Duration
	// Queue is the AgentRun queue: Reconcile looks again (AddAfter) when a wait ends.
	Queue *controller.Queue
	// Deletions counts the objects deleted at the end of a retention, by kind; Missing, the runs
	// found missing their Job, and Failed, those failed for it, by namespace.
	Deletions, Missing, Failed *prometheus.CounterVec
	// Archive writes finished runs to the run archive before their retention ends (without a
	// Store, archiving is off, and it releases the archive finalizer from runs that have it).
	Archive *archiver.Archiver
}

// Reconcile deletes the AgentRun named by key ("<namespace>/<name>") and its Jobs once it is
// finished and its retention has passed, or, while it runs, checks that its Jobs are there.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	obj, ok, _ := r.Runs[ns].GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	ar := obj.(*agentsv1alpha1.AgentRun)
	if stop, err := r.Archive.AgentRun(ctx, ar); stop || err != nil {
		return err
	}
	if ar.DeletionTimestamp != nil {
		return nil
	}
	if job.Terminal(ar.Status.Phase) {
		return r.retain(ctx, key, ar)
	}
	if ar.CancelInEffect() || r.parentCancelled(ar) {
		return nil // cancel-propagator stops its Jobs on purpose
	}
	return r.checkJobs(ctx, key, ar)
}

// ownedByOrchestration reports whether an OrchestrationRun that still exists owns the run (its
// retention is the OrchestrationRun's: the run is deleted with it). A step run whose
// OrchestrationRun is gone (or was replaced: another UID) is an orphan, kept by its own retention:
// the cache's absence is confirmed with a live GET.
func (r *Reconciler) ownedByOrchestration(ctx context.Context, ar *agentsv1alpha1.AgentRun) (bool, error) {
	if controller.ControllerOf(ar.OwnerReferences, "OrchestrationRun") == nil {
		return false, nil
	}
	if r.cachedOwner(ar) != nil {
		return true, nil
	}
	or, err := r.liveOwner(ctx, ar)
	return or != nil, err
}

// parentCancelled reports whether the run is a step of an OrchestrationRun whose cancel is in
// effect, as the cache shows it.
func (r *Reconciler) parentCancelled(ar *agentsv1alpha1.AgentRun) bool {
	or := r.cachedOwner(ar)
	return or != nil && or.CancelInEffect()
}

// parentCancelledLive is parentCancelled asked of the API server: the cache of OrchestrationRuns
// may lag behind that of Jobs.
func (r *Reconciler) parentCancelledLive(ctx context.Context, ar *agentsv1alpha1.AgentRun) (bool, error) {
	or, err := r.liveOwner(ctx, ar)
	return or != nil && or.CancelInEffect(), err
}

// cachedOwner is the OrchestrationRun that controls the run (by the UID its owner reference
// names) as the cache shows it, or nil.
func (r *Reconciler) cachedOwner(ar *agentsv1alpha1.AgentRun) *orchv1alpha1.OrchestrationRun {
	ref := controller.ControllerOf(ar.OwnerReferences, "OrchestrationRun")
	if ref == nil || r.OrchRuns[ar.Namespace] == nil {
		return nil
	}
	o, ok, _ := r.OrchRuns[ar.Namespace].GetStore().GetByKey(ar.Namespace + "/" + ref.Name)
	if or, _ := o.(*orchv1alpha1.OrchestrationRun); ok && or != nil && or.UID == ref.UID {
		return or
	}
	return nil
}

// liveOwner is cachedOwner asked of the API server: nil when the OrchestrationRun is gone or was
// replaced (another UID).
func (r *Reconciler) liveOwner(ctx context.Context, ar *agentsv1alpha1.AgentRun) (*orchv1alpha1.OrchestrationRun, error) {
	ref := controller.ControllerOf(ar.OwnerReferences, "OrchestrationRun")
	if ref == nil {
		return nil, nil
	}
	or, err := r.Client.OrchestrationV1alpha1().OrchestrationRuns(ar.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get OrchestrationRun %s/%s, the owner of AgentRun %s: %w", ar.Namespace, ref.Name, ar.Name, err)
	case or.UID != ref.UID:
		return nil, nil
	}
	return or, nil
}

// retain deletes a finished run, and its Jobs, once its retention has passed.
func (r *Reconciler) retain(ctx context.Context, key string, ar *agentsv1alpha1.AgentRun) error {
	if ar.Status.FinishedAt == nil {
		return nil
	}
	if owned, err := r.ownedByOrchestration(ctx, ar); owned || err != nil {
		return err
	}
	ttl, wait := job.Retention(ar.Status.FinishedAt.Time, ar.Spec.TTLSecondsAfterFinished, r.Retention, r.Now())
	if wait > 0 {
		r.Queue.AddAfter(key, wait)
		return nil
	}
	if err := job.DeleteRun(ctx, r.Kube, r.Client, r.Jobs[ar.Namespace], ar, r.Deletions); err != nil {
		return fmt.Errorf("at the end of AgentRun %s's retention: %w", key, err)
	}
	logging.FromContext(ctx).Info("deleted AgentRun at the end of its retention", "run", key, "finishedAt", ar.Status.FinishedAt.Time, "retention", ttl)
	return nil
}

// expectedJobs are the Jobs a non-terminal run is waiting on: its Job, or the Jobs of its
// workflow steps that are Pending or Running.
func expectedJobs(ar *agentsv1alpha1.AgentRun) []agentsv1alpha1.JobRef {
	var out []agentsv1alpha1.JobRef
	if wf := ar.Status.Workflow; wf != nil && len(wf.Steps) > 0 {
		for _, s := range wf.Steps {
			if s.JobRef != nil && (s.Phase == agentsv1alpha1.PhasePending || s.Phase == agentsv1alpha1.PhaseRunning) {
				out = append(out, *s.JobRef)
			}
		}
		return out
	}
	if ar.Status.JobRef != nil {
		out = append(out, *ar.Status.JobRef)
	}
	return out
}

// jobMissing says why the run's Job ref can no longer deliver a result, or "" when it can. A
// Job absent from the cache is confirmed with a live GET: the cache may merely lag.
func (r *Reconciler) jobMissing(ctx context.Context, ns string, ref agentsv1alpha1.JobRef) (string, error) {
	doomed := func(j *batchv1.Job) string {
		if j.DeletionTimestamp != nil && job.FinishedAt(j).IsZero() {
			return fmt.Sprintf("Job %s was deleted before it finished", j.Name)
		}
		return ""
	}
	if o, ok, _ := r.Jobs[ns].GetStore().GetByKey(ns + "/" + ref.Name); ok {
		if j := o.(*batchv1.Job); string(j.UID) == ref.UID && doomed(j) == "" {
			return "", nil
		}
	}
	live, err := r.Kube.BatchV1().Jobs(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && string(live.UID) != ref.UID):
		return fmt.Sprintf("Job %s (uid %s) is gone before its result was recorded", ref.Name, ref.UID), nil
	case err != nil:
		return "", fmt.Errorf("get Job %s/%s: %w", ns, ref.Name, err)
	}
	return doomed(live), nil
}

// checkJobs reports a run whose Job is missing, and fails it once MissingGrace has passed.
func (r *Reconciler) checkJobs(ctx context.Context, key string, ar *agentsv1alpha1.AgentRun) error {
	var why []string
	for _, ref := range expectedJobs(ar) {
		w, err := r.jobMissing(ctx, ar.Namespace, ref)
		if err != nil {
			return err
		}
		if w != "" {
			why = append(why, w)
		}
	}
	c := meta.FindStatusCondition(ar.Status.Conditions, CondJobMissing)
	reported := c != nil && c.Status == metav1.ConditionTrue
	if len(why) == 0 {
		if reported {
			return r.write(ctx, ar, "", "", "", &pb.Condition{Type: CondJobMissing, Status: "False",
				Reason: reasons.JobFound, Message: "the run's Jobs are all there"})
		}
		return nil
	}
	msg := strings.Join(why, "; ")
	// A cancel deletes the run's Jobs on purpose; the cache may not show it yet.
	live, err := r.Client.AgentsV1alpha1().AgentRuns(ar.Namespace).Get(ctx, ar.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get AgentRun %s: %w", key, err)
	case live.CancelInEffect() || job.Terminal(live.Status.Phase):
		return nil
	}
	// A step's Jobs are deleted by its OrchestrationRun's cancel at the same time as its own
	// spec.cancel is set: the OrchestrationRun's spec.cancel, set first, is asked for too.
	if cancelled, err := r.parentCancelledLive(ctx, live); cancelled || err != nil {
		return err
	}
	if !reported {
		note := fmt.Sprintf("%s; the run fails with %s in %s unless it is back", msg, reasons.WorkflowJobMissing, r.MissingGrace)
		if err := r.write(ctx, ar, "", "", "",
			&pb.Condition{Type: CondJobMissing, Status: "True", Reason: reasons.WorkflowJobMissing, Message: note}); err != nil {
			return err
		}
		r.Missing.WithLabelValues(ar.Namespace).Inc()
		logging.FromContext(ctx).Warn("run is missing its Job", "run", key, "why", msg)
		eventclient.Notify(ctx, r.Events, agentsv1alpha1.GroupVersion.String(), "AgentRun", ar,
			corev1.EventTypeWarning, reasons.WorkflowJobMissing, "Check", note)
		r.Queue.AddAfter(key, r.MissingGrace)
		return nil
	}
	if wait := r.MissingGrace - r.Now().Sub(c.LastTransitionTime.Time); wait > 0 {
		r.Queue.AddAfter(key, wait)
		return nil
	}
	msg += "; its result cannot be collected"
	if err := r.write(ctx, ar, agentsv1alpha1.PhaseFailed, reasons.WorkflowJobMissing, msg,
		&pb.Condition{Type: reasons.CondSucceeded, Status: "False", Reason: reasons.WorkflowJobMissing, Message: msg}); err != nil {
		return err
	}
	r.Failed.WithLabelValues(ar.Namespace).Inc()
	logging.FromContext(ctx).Warn("run failed: its Job is missing", "run", key, "why", msg)
	return nil
}

// write records status through status-writer. The run's observedGeneration is kept: job-gc
// reconciles no spec.
func (r *Reconciler) write(ctx context.Context, ar *agentsv1alpha1.AgentRun, phase, reason, message string, conds ...*pb.Condition) error {
	gen := ar.Status.ObservedGeneration
	if gen == 0 {
		gen = ar.Generation
	}
	_, err := r.Status.Write(ctx, statusclient.Request("AgentRun", ar, gen, phase, reason, message, conds...))
	switch err := statusclient.Outcome(err); {
	case err == nil:
		return nil
	case errors.Is(err, statusclient.ErrStale):
		// The run moved on (finished, a newer generation): the retry reads the newer object
		// from the cache.
		return controller.Waiting(err)
	default:
		return fmt.Errorf("write AgentRun %s/%s status: %w", ar.Namespace, ar.Name, err)
	}
}
