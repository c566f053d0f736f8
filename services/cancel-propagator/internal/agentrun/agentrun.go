// Package agentrun cancels AgentRuns: it suspends and deletes a cancelled run's Jobs, deletes
// their pods with their grace period (the Job controller does too), shuts down and deletes its
// Argo Workflows, and follows the cancel protocol (package cancel) around that.
package agentrun

import (
	"context"
	"fmt"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

// Reconciler cancels AgentRuns. The informer maps are by namespace and filled before the first
// Reconcile.
type Reconciler struct {
	*cancel.Protocol
	// Kube suspends and deletes Jobs, deletes pods and lists them live.
	Kube kubernetes.Interface
	// AgentRuns, Jobs (indexed cancel.ByOwner) and Pods (indexed cancel.ByJobUID) by namespace.
	AgentRuns, Jobs, Pods map[string]cache.SharedIndexInformer
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
		n, err := r.stopPods(ctx, ns, ar.UID, uid)
		if err != nil {
			return err
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("Job %s (%d pod(s))", job, n))
		}
	}
	sort.Strings(left)
	wl, err := r.StopWorkflows(ctx, cancel.Key(cancel.KindAgentRun, ns, name), ns, ar.UID, agentsv1alpha1.LabelAgentRun, name)
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
		remember(&agentsv1alpha1.JobRef{Name: j.Name, UID: string(j.UID)})
		if err := r.StopJob(ctx, ar.UID, j); err != nil {
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

// StopJob suspends the Job (its controller deletes the pods and starts none) and deletes it,
// counting it for the run with uid run. A Job this process already deleted is not deleted or
// counted again, however stale the cache's copy (a second pass can run before the cache shows the
// deletion).
func (r *Reconciler) StopJob(ctx context.Context, run types.UID, j *batchv1.Job) error {
	if j.DeletionTimestamp != nil {
		return nil
	}
	// Remembered before the deletion, so that the informer's delete event, which may arrive
	// before Delete returns, is what forgets it (no entry outlives its Job).
	if r.MarkJob(j.UID) {
		return nil
	}
	forget := func() { r.ForgetJob(j.UID) }
	jobs := r.Kube.BatchV1().Jobs(j.Namespace)
	if j.Spec.Suspend == nil || !*j.Spec.Suspend {
		_, err := jobs.Patch(ctx, j.Name, types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{FieldManager: "agentplane-cancel-propagator"})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
			forget()
			return fmt.Errorf("suspend Job %s/%s: %w", j.Namespace, j.Name, err)
		}
	}
	err := jobs.Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		Preconditions: &metav1.Preconditions{UID: ptr.To(j.UID)}})
	switch {
	case err == nil:
		r.Record(run, "Job", 1)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone (a stale copy of a Job whose deletion was observed and forgotten), or
		// another Job of that name: nothing this call stopped, counted or needs to remember.
		forget()
	default:
		forget()
		return fmt.Errorf("delete Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// stopPods deletes, with their grace period, the pods of the Job with uid that are not being
// deleted yet, and returns how many of its pods have not finished.
func (r *Reconciler) stopPods(ctx context.Context, ns string, run, uid types.UID) (int, error) {
	items, _ := r.Pods[ns].GetIndexer().ByIndex(cancel.ByJobUID, string(uid))
	running := 0
	for _, o := range items {
		pod := o.(*corev1.Pod)
		if ph := pod.Status.Phase; ph == corev1.PodSucceeded || ph == corev1.PodFailed {
			continue
		}
		running++
		hit := r.MarkPod(pod.UID)
		if pod.DeletionTimestamp != nil || hit {
			continue
		}
		err := r.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return running, fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if err == nil { // likewise: a pod already gone was not stopped by this call
			r.Record(run, "Pod", 1)
		}
	}
	return running, nil
}
