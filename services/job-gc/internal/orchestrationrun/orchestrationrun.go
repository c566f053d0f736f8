// Package orchestrationrun is job-gc's reconciler of OrchestrationRuns: retention (#32 item 3).
// A finished OrchestrationRun (status.finishedAt set) is deleted spec.ttlSecondsAfterFinished
// (or Retention) after finishedAt, with its step AgentRuns and their Jobs, each deleted by job-gc
// itself (Jobs, then runs, then the OrchestrationRun), so that none outlives it even where no
// garbage collector runs. A step run whose Job still holds the job-result finalizer is deleted all
// the same: its Job goes once job-gc sees the run gone (the job package).
package orchestrationrun

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/services/job-gc/internal/archiver"
	"github.com/agentplane/agentplane/services/job-gc/internal/job"
)

// ByOrchestrationRun is the name of the AgentRun informers' index by the key
// ("<namespace>/<name>") of the OrchestrationRun that controls them.
const ByOrchestrationRun = "orchestrationrun"

// Reconciler deletes finished OrchestrationRuns, their step AgentRuns and those runs' Jobs after
// their retention. Its fields are set once, before the controller runs; the informer maps may be
// filled until then.
type Reconciler struct {
	// OrchRuns, Runs and Jobs are the informers of OrchestrationRuns, of AgentRuns (indexed by
	// ByOrchestrationRun) and of run-controller's Jobs (indexed by job.ByRun), by namespace.
	OrchRuns, Runs, Jobs map[string]cache.SharedIndexInformer
	// Client is the generated clientset of the agentplane API groups; Kube deletes Jobs.
	Client versioned.Interface
	Kube   kubernetes.Interface
	// Now is the clock.
	Now func() time.Time
	// Retention is how long a finished OrchestrationRun without spec.ttlSecondsAfterFinished is
	// kept.
	Retention time.Duration
	// Queue is the OrchestrationRun queue: Reconcile looks again (AddAfter) when a wait ends.
	Queue *controller.Queue
	// Deletions counts the objects deleted at the end of a retention, by kind.
	Deletions *prometheus.CounterVec
	// Archive writes finished runs to the run archive before their retention ends (without a
	// Store, archiving is off, and it releases the archive finalizer from runs that have it).
	Archive *archiver.Archiver
}

// Reconcile deletes the OrchestrationRun named by key ("<namespace>/<name>"), its step runs and
// their Jobs once it is finished and its retention has passed.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	obj, ok, _ := r.OrchRuns[ns].GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	or := obj.(*orchv1alpha1.OrchestrationRun)
	if stop, err := r.Archive.OrchestrationRun(ctx, or); stop || err != nil {
		return err
	}
	if or.DeletionTimestamp != nil || or.Status.FinishedAt == nil {
		return nil
	}
	ttl, wait := job.Retention(or.Status.FinishedAt.Time, or.Spec.TTLSecondsAfterFinished, r.Retention, r.Now())
	if wait > 0 {
		r.Queue.AddAfter(key, wait)
		return nil
	}
	for _, ar := range controller.ByIndex[*agentsv1alpha1.AgentRun](r.Runs[ns], ByOrchestrationRun, key) {
		if ref := controller.ControllerOf(ar.OwnerReferences, "OrchestrationRun"); ref == nil || ref.UID != or.UID {
			continue
		}
		if err := job.DeleteRun(ctx, r.Kube, r.Client, r.Jobs[ns], ar, r.Deletions); err != nil {
			return fmt.Errorf("at the end of OrchestrationRun %s's retention: %w", key, err)
		}
	}
	bg := metav1.DeletePropagationBackground
	err := r.Client.OrchestrationV1alpha1().OrchestrationRuns(ns).Delete(ctx, or.Name,
		metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &or.UID}})
	switch {
	case err == nil:
		r.Deletions.WithLabelValues("OrchestrationRun").Inc()
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
	default:
		return fmt.Errorf("delete OrchestrationRun %s at the end of its retention: %w", key, err)
	}
	logging.FromContext(ctx).Info("deleted OrchestrationRun at the end of its retention", "run", key, "finishedAt", or.Status.FinishedAt.Time, "retention", ttl)
	return nil
}
