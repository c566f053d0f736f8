// Package orchestrationrun cancels OrchestrationRuns: in one pass over a cancelled run's
// unfinished AgentRuns, several at a time, it sets spec.cancel on each and deletes its Jobs and
// their pods (each AgentRun is then cancelled by package agentrun, which finds them already
// stopping and waits for the pods); it shuts down and deletes the run's Argo Workflows, and follows the cancel
// protocol (package cancel) around that.
package orchestrationrun

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	gone := make([]bool, len(running))
	err = cancel.Each(len(running), width, func(i int) error {
		var err error
		gone[i], err = r.stopStep(ctx, or, running[i])
		return err
	})
	if err != nil {
		return err
	}
	var left []string
	still := running[:0]
	for i, ar := range running {
		if !gone[i] {
			still = append(still, ar)
			left = append(left, "AgentRun "+ar.Name)
		}
	}
	running = still
	wl, err := r.StopWorkflows(ctx, cancel.Key(cancel.KindOrchestrationRun, ns, name), ns, or.UID, agentsv1alpha1.LabelOrchestrationRun, name)
	if err != nil {
		return err
	}
	left = append(left, wl...)
	done, err := r.Finish(ctx, run, cancel.Key(cancel.KindOrchestrationRun, ns, name), at, left)
	if done && len(left) > 0 {
		// Timed out: the AgentRuns still running are Cancelled too, so that job-gc lets their
		// Jobs go.
		for _, ar := range running {
			msg := "its OrchestrationRun " + name + "'s cancel timed out"
			_ = r.Write(ctx, cancel.Run{Kind: cancel.KindAgentRun, Meta: ar.ObjectMeta}, agentsv1alpha1.PhaseCancelled, reasons.CancelTimedOut, msg,
				cancel.Cond(metav1.ConditionTrue, reasons.CancelTimedOut, msg))
		}
	}
	return err
}

// stopStep sets spec.cancel on the OrchestrationRun's unfinished step run ar and deletes the
// Jobs it has and their pods, which its own cancel (package agentrun) would otherwise do a little
// later. It reports whether the step run is gone.
func (r *Reconciler) stopStep(ctx context.Context, or *orchv1alpha1.OrchestrationRun, ar *agentsv1alpha1.AgentRun) (bool, error) {
	if !ar.Spec.Cancel {
		_, err := r.Client.AgentsV1alpha1().AgentRuns(ar.Namespace).Patch(ctx, ar.Name, types.MergePatchType,
			[]byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("cancel AgentRun %s/%s: %w", ar.Namespace, ar.Name, err)
		}
		r.Record(or.UID, cancel.KindAgentRun, 1)
	}
	jobs, _ := r.Jobs[ar.Namespace].GetIndexer().ByIndex(cancel.ByOwner, ar.Namespace+"/"+ar.Name)
	set, k := r.JobsOf(ar.UID), cancel.Key(cancel.KindAgentRun, ar.Namespace, ar.Name)
	for _, o := range jobs {
		j := o.(*batchv1.Job)
		if ref := controller.ControllerOf(j.OwnerReferences, cancel.KindAgentRun); ref == nil || ref.UID != ar.UID {
			continue
		}
		if err := r.StopJob(ctx, ar.UID, set, k, j); err != nil {
			return false, err
		}
		if _, err := r.StopPods(ctx, r.Pods[ar.Namespace], k, ar.UID, j.UID); err != nil {
			return false, err
		}
	}
	return false, nil
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
