// Package orchestrationrun cancels OrchestrationRuns: in one pass over a cancelled run's
// unfinished step AgentRuns, several at a time, it sets spec.cancel on each while it deletes its
// Jobs and then their pods; a step whose pods have stopped (the cache, then one live list of the run's pods
// per pass) is written Cancelled by the pass, one status write and no event of its own (package
// agentrun leaves such steps alone while the OrchestrationRun's cancel goes on). It shuts down and
// deletes the Argo Workflows of the run and its steps, and follows the cancel protocol (package
// cancel) around that.
package orchestrationrun

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

// Reconciler cancels OrchestrationRuns. The informer maps are by namespace and filled before the
// first Reconcile.
type Reconciler struct {
	*cancel.Protocol
	// Client is the generated clientset of the agentplane API groups: it sets the AgentRuns'
	// spec.cancel.
	Client versioned.Interface
	// Kube lists the run's pods live before its steps are written Cancelled.
	Kube kubernetes.Interface
	// OrchestrationRuns, AgentRuns (indexed cancel.ByOwner: by OrchestrationRun), Jobs (indexed
	// cancel.ByOwner: by AgentRun) and Pods (indexed cancel.ByJobUID) by namespace.
	OrchestrationRuns, AgentRuns, Jobs, Pods map[string]cache.SharedIndexInformer
}

// width is how many AgentRuns one pass stops at a time.
const width = 16

// Reconcile cancels the OrchestrationRun named by key ("<namespace>/<name>", the queue's key)
// when its spec.cancel is set.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, name := controller.SplitKey(key)
	o, ok, _ := r.OrchestrationRuns[ns].GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	or := o.(*orchv1alpha1.OrchestrationRun)
	if !or.Spec.Cancel || or.DeletionTimestamp != nil {
		return nil
	}
	run := cancel.Run{Kind: cancel.KindOrchestrationRun, APIVersion: orchv1alpha1.GroupVersion.String(), Meta: or.ObjectMeta, Phase: or.Status.Phase, Conds: or.Status.Conditions}
	children, _ := r.AgentRuns[ns].GetIndexer().ByIndex(cancel.ByOwner, ns+"/"+name)
	goOn, at, err := r.Begin(ctx, run, fmt.Sprintf("its %d AgentRun(s) and their Jobs", len(children)))
	if err != nil {
		return err
	}
	if !goOn {
		if or.Status.Phase == agentsv1alpha1.PhaseCancelled {
			// A step run created after the OrchestrationRun was Cancelled (run-controller began
			// the step before the cancel) is cancelled too, so that none runs or stays Pending.
			return r.cancelLateSteps(ctx, or, children)
		}
		return nil
	}
	k := cancel.Key(cancel.KindOrchestrationRun, ns, name)
	var running []*agentsv1alpha1.AgentRun
	for _, c := range children {
		ar := c.(*agentsv1alpha1.AgentRun)
		if ref := controller.ControllerOf(ar.OwnerReferences, cancel.KindOrchestrationRun); ref == nil || ref.UID != or.UID || cancel.IsTerminal(ar.Status.Phase) {
			continue
		}
		if !r.Done(ar.UID) {
			running = append(running, ar)
		}
	}
	// Each unfinished step: spec.cancel set, its Jobs and their pods deleted.
	stops := make([]stop, len(running))
	err = cancel.Each(len(running), width, func(i int) error {
		var err error
		stops[i], err = r.stopStep(ctx, or, k, running[i])
		return err
	})
	if err != nil {
		return err
	}
	left, still, err := r.finishSteps(ctx, or, k, at, stops)
	if err != nil {
		return err
	}
	owners := []cancel.Owner{{UID: or.UID, Label: agentsv1alpha1.LabelOrchestrationRun, Name: name}}
	for _, s := range stops {
		owners = append(owners, cancel.Owner{UID: s.ar.UID, Label: agentsv1alpha1.LabelAgentRun, Name: s.ar.Name})
	}
	wl, err := r.StopWorkflows(ctx, k, ns, owners...)
	if err != nil {
		return err
	}
	left = append(left, wl...)
	done, err := r.Finish(ctx, run, k, at, left)
	if done && len(left) > 0 {
		// Timed out: the AgentRuns still running are Cancelled too, so that job-gc lets their
		// Jobs go.
		for _, s := range still {
			msg := "its OrchestrationRun " + name + "'s cancel timed out"
			_ = r.Write(ctx, cancel.Run{Kind: cancel.KindAgentRun, Meta: s.ar.ObjectMeta}, agentsv1alpha1.PhaseCancelled, reasons.CancelTimedOut, msg,
				cancel.Cond(metav1.ConditionTrue, reasons.CancelTimedOut, msg))
		}
	}
	return err
}

// finishSteps writes Cancelled each stopped step whose pods have stopped: the cache shows them
// stopped and one live list of the OrchestrationRun's pods (queue key k, cancel requested at at)
// confirms it. It returns what still runs, and the steps it belongs to.
func (r *Reconciler) finishSteps(ctx context.Context, or *orchv1alpha1.OrchestrationRun, k string, at time.Time, stops []stop) ([]string, []stop, error) {
	var (
		live map[types.UID]int
		err  error
	)
	for _, s := range stops {
		if !s.gone && s.pods == 0 {
			if live, err = r.livePods(ctx, or, stops); err != nil {
				return nil, nil, err
			}
			break
		}
	}
	var left []string
	var ending, still []stop
	behind := false // the cache shows stopped what the API server does not
	for _, s := range stops {
		switch n := max(s.pods, live[s.ar.UID]); {
		case s.gone:
		case n > 0:
			still = append(still, s)
			left = append(left, fmt.Sprintf("AgentRun %s (%d pod(s))", s.ar.Name, n))
			behind = behind || s.pods == 0
		default:
			ending = append(ending, s)
		}
	}
	if behind {
		r.EnqueueAfter(k, 500*time.Millisecond)
	}
	err = cancel.Each(len(ending), width, func(i int) error {
		ar := ending[i].ar
		return r.FinishStep(ctx, cancel.Run{Kind: cancel.KindAgentRun, Meta: ar.ObjectMeta, Phase: ar.Status.Phase}, or.Name, at)
	})
	return left, still, err
}

// stop is what a pass did to one step run: ar as it was last seen (after the pass's spec.cancel
// patch, if it made one), whether it is gone, and how many of its pods the cache shows not
// finished.
type stop struct {
	ar   *agentsv1alpha1.AgentRun
	gone bool
	pods int
}

// stopStep sets spec.cancel on the OrchestrationRun's unfinished step run ar (so that
// run-controller starts nothing more for it) and deletes its Jobs and their pods, remembering the
// Jobs under the OrchestrationRun's queue key k, so that their pods' events bring the
// OrchestrationRun back. The patch and the deletions go out at once, not one after the other:
// nothing waits on the patch, because run-controller leaves alone the steps of an
// OrchestrationRun whose cancel is in effect and job-gc reports no Job of theirs missing (each
// looks at the OrchestrationRun's spec.cancel, which was set before this pass began). A Job is
// deleted before its pods, so that the Job controller, which starts no pod for a Job being
// deleted, replaces none of them.
func (r *Reconciler) stopStep(ctx context.Context, or *orchv1alpha1.OrchestrationRun, k string, ar *agentsv1alpha1.AgentRun) (stop, error) {
	s := stop{ar: ar}
	var (
		patched  = make(chan error, 1)
		patching = !ar.Spec.Cancel && !r.MarkStep(ar.UID)
	)
	if patching {
		go func() {
			cur, err := r.Client.AgentsV1alpha1().AgentRuns(ar.Namespace).Patch(ctx, ar.Name, types.MergePatchType,
				[]byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{})
			if err == nil {
				s.ar = cur
			}
			patched <- err
		}()
	}
	pods, err := r.stopJobs(ctx, k, ar)
	if patching {
		switch perr := <-patched; {
		case apierrors.IsNotFound(perr):
			return stop{ar: ar, gone: true}, nil
		case perr != nil:
			r.ForgetStep(ar.UID)
			return s, fmt.Errorf("cancel AgentRun %s/%s: %w", ar.Namespace, ar.Name, perr)
		default:
			r.Record(or.UID, cancel.KindAgentRun, 1)
		}
	}
	s.pods = pods
	return s, err
}

// stopJobs deletes the Jobs of the step run ar and then their pods, and returns how many of their
// pods have not finished.
func (r *Reconciler) stopJobs(ctx context.Context, k string, ar *agentsv1alpha1.AgentRun) (int, error) {
	set := r.JobsOf(ar.UID)
	refs := []*agentsv1alpha1.JobRef{ar.Status.JobRef} // the Jobs its status records: one may be gone while its pods stop
	if ar.Status.Workflow != nil {
		for _, st := range ar.Status.Workflow.Steps {
			refs = append(refs, st.JobRef)
		}
	}
	for _, ref := range refs {
		if ref != nil && ref.UID != "" {
			set.Remember(k, types.UID(ref.UID), ref.Name)
		}
	}
	jobs, _ := r.Jobs[ar.Namespace].GetIndexer().ByIndex(cancel.ByOwner, ar.Namespace+"/"+ar.Name)
	for _, o := range jobs {
		j := o.(*batchv1.Job)
		if ref := controller.ControllerOf(j.OwnerReferences, cancel.KindAgentRun); ref == nil || ref.UID != ar.UID {
			continue
		}
		if err := r.StopJob(ctx, ar.UID, set, k, j); err != nil {
			return 0, err
		}
	}
	pods := 0
	for uid := range set.All() { // also the Jobs already gone whose pods may still stop
		n, err := r.StopPods(ctx, r.Pods[ar.Namespace], k, ar.UID, uid)
		if err != nil {
			return pods, err
		}
		pods += n
	}
	return pods, nil
}

// livePods asks the API server (one list of the OrchestrationRun's pods, by its label) how many
// pods of each stopped step (by the step's UID) have not finished. A pod is a step's when its Job
// is one of the step's, or it carries the step's label.
func (r *Reconciler) livePods(ctx context.Context, or *orchv1alpha1.OrchestrationRun, stops []stop) (map[types.UID]int, error) {
	sel := agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController + "," +
		agentsv1alpha1.LabelOrchestrationRun + "=" + agentsv1alpha1.LabelValue(or.Name)
	l, err := r.Kube.CoreV1().Pods(or.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list the pods of OrchestrationRun %s/%s: %w", or.Namespace, or.Name, err)
	}
	byJob, byLabel := map[types.UID]types.UID{}, map[string]types.UID{}
	for _, s := range stops {
		for uid := range r.JobsOf(s.ar.UID).All() {
			byJob[uid] = s.ar.UID
		}
		byLabel[agentsv1alpha1.LabelValue(s.ar.Name)] = s.ar.UID
	}
	n := map[types.UID]int{}
	for _, pod := range l.Items {
		if ph := pod.Status.Phase; ph == corev1.PodSucceeded || ph == corev1.PodFailed {
			continue
		}
		step, ok := byLabel[pod.Labels[agentsv1alpha1.LabelAgentRun]]
		if ref := controller.ControllerOf(pod.OwnerReferences, "Job"); ref != nil && byJob[ref.UID] != "" {
			step, ok = byJob[ref.UID], true
		}
		if ok {
			n[step]++
		}
	}
	return n, nil
}

// cancelLateSteps sets spec.cancel on every unfinished step run of the Cancelled OrchestrationRun
// or that does not have it: the cancel reached the OrchestrationRun before the step was created.
func (r *Reconciler) cancelLateSteps(ctx context.Context, or *orchv1alpha1.OrchestrationRun, children []any) error {
	for _, c := range children {
		ar := c.(*agentsv1alpha1.AgentRun)
		if ref := controller.ControllerOf(ar.OwnerReferences, cancel.KindOrchestrationRun); ref == nil || ref.UID != or.UID ||
			cancel.IsTerminal(ar.Status.Phase) || ar.Spec.Cancel || ar.DeletionTimestamp != nil {
			continue
		}
		_, err := r.Client.AgentsV1alpha1().AgentRuns(or.Namespace).Patch(ctx, ar.Name, types.MergePatchType,
			[]byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("cancel AgentRun %s/%s, a step begun after its OrchestrationRun %s was cancelled: %w", or.Namespace, ar.Name, or.Name, err)
		default:
			r.Record(or.UID, cancel.KindAgentRun, 1)
		}
	}
	return nil
}
