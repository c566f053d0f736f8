// Package agentrun cancels AgentRuns: it deletes a cancelled run's Jobs and their pods
// (cancel.StopJob, cancel.StopPods), shuts down and deletes its Argo Workflows, and follows the
// cancel protocol (package cancel) around that. A step of an OrchestrationRun whose cancel goes on
// is left to the OrchestrationRun's passes (package orchestrationrun).
package agentrun

import (
	"context"
	"fmt"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

// Reconciler cancels AgentRuns. The informer maps are by namespace and filled before the first
// Reconcile.
type Reconciler struct {
	*cancel.Protocol
	// Kube deletes pods and lists them live (the protocol deletes Jobs).
	Kube kubernetes.Interface
	// OrchestrationRuns, AgentRuns, Jobs (indexed cancel.ByOwner) and Pods (indexed
	// cancel.ByJobUID) by namespace.
	OrchestrationRuns, AgentRuns, Jobs, Pods map[string]cache.SharedIndexInformer
}

// Reconcile cancels the AgentRun named by key ("<namespace>/<name>", the queue's key) when its
// spec.cancel is set.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, name := controller.SplitKey(key)
	o, ok, _ := r.AgentRuns[ns].GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	ar := o.(*agentsv1alpha1.AgentRun)
	if !ar.Spec.Cancel || ar.DeletionTimestamp != nil {
		return nil
	}
	if !cancel.IsTerminal(ar.Status.Phase) && r.stepOfCancel(ar) {
		return nil // its OrchestrationRun's passes stop it and write it Cancelled
	}
	run := cancel.Run{Kind: cancel.KindAgentRun, APIVersion: agentsv1alpha1.GroupVersion.String(), Meta: ar.ObjectMeta, Phase: ar.Status.Phase, Conds: ar.Status.Conditions}
	jobs, _ := r.Jobs[ns].GetIndexer().ByIndex(cancel.ByOwner, ns+"/"+name)
	goOn, at, err := r.Begin(ctx, run, fmt.Sprintf("its %d Job(s)", len(jobs)))
	if err != nil {
		return err
	}
	if !goOn {
		if ar.Status.Phase == agentsv1alpha1.PhaseCancelled {
			// A Job that appears after the run was Cancelled (run-controller claimed the start
			// before the cancel and created the Job after it) is stopped too: nothing of a
			// cancelled run keeps running.
			_, err = r.stopJobs(ctx, ar, jobs)
		}
		return err
	}
	all, err := r.stopJobs(ctx, ar, jobs)
	if err != nil {
		return err
	}
	var left []string
	for uid, job := range all {
		n, err := r.StopPods(ctx, r.Pods[ns], cancel.Key(cancel.KindAgentRun, ns, name), ar.UID, uid)
		if err != nil {
			return err
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("Job %s (%d pod(s))", job, n))
		}
	}
	sort.Strings(left)
	wl, err := r.StopWorkflows(ctx, cancel.Key(cancel.KindAgentRun, ns, name), ns, cancel.Owner{UID: ar.UID, Label: agentsv1alpha1.LabelAgentRun, Name: name})
	if err != nil {
		return err
	}
	left = append(left, wl...)
	if len(left) == 0 {
		// The cache says nothing runs; the API server confirms before the run is called Cancelled.
		if running, err := r.podsStillRunning(ctx, ns, all); err != nil || running {
			if running {
				r.EnqueueAfter(cancel.Key(cancel.KindAgentRun, ns, name), 500*time.Millisecond)
			}
			return err
		}
	}
	_, err = r.Finish(ctx, run, cancel.Key(cancel.KindAgentRun, ns, name), at, left)
	return err
}

// stepOfCancel reports whether ar is a step of an OrchestrationRun whose cancel goes on
// (cancel.TakesSteps).
func (r *Reconciler) stepOfCancel(ar *agentsv1alpha1.AgentRun) bool {
	ref := controller.ControllerOf(ar.OwnerReferences, cancel.KindOrchestrationRun)
	if ref == nil {
		return false
	}
	o, ok, _ := r.OrchestrationRuns[ar.Namespace].GetStore().GetByKey(ar.Namespace + "/" + ref.Name)
	if !ok {
		return false
	}
	or := o.(*orchv1alpha1.OrchestrationRun)
	return or.UID == ref.UID && r.TakesSteps(or)
}

// stopJobs stops the run's Jobs in the cache and returns every Job of the run by UID: those in
// the cache, those its status records, and those seen before (a Job may be gone while its pods
// still stop).
func (r *Reconciler) stopJobs(ctx context.Context, ar *agentsv1alpha1.AgentRun, jobs []any) (map[types.UID]string, error) {
	set := r.JobsOf(ar.UID)
	remember := func(ref *agentsv1alpha1.JobRef) {
		if ref != nil && ref.UID != "" {
			set.Remember(cancel.Key(cancel.KindAgentRun, ar.Namespace, ar.Name), types.UID(ref.UID), ref.Name)
		}
	}
	remember(ar.Status.JobRef)
	if ar.Status.Workflow != nil {
		for _, st := range ar.Status.Workflow.Steps {
			remember(st.JobRef)
		}
	}
	for _, o := range jobs {
		j := o.(*batchv1.Job)
		if ref := controller.ControllerOf(j.OwnerReferences, cancel.KindAgentRun); ref == nil || ref.UID != ar.UID {
			continue
		}
		if err := r.StopJob(ctx, ar.UID, set, cancel.Key(cancel.KindAgentRun, ar.Namespace, ar.Name), j); err != nil {
			return nil, err
		}
	}
	return set.All(), nil
}

// podsStillRunning asks the API server whether any pod of the Jobs (by UID) has not finished.
func (r *Reconciler) podsStillRunning(ctx context.Context, ns string, jobs map[types.UID]string) (bool, error) {
	for uid := range jobs {
		l, err := r.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(uid)})
		if err != nil {
			return false, fmt.Errorf("list the pods of Job %s/%s: %w", ns, jobs[uid], err)
		}
		for _, pod := range l.Items {
			if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				return true, nil
			}
		}
	}
	return false, nil
}
