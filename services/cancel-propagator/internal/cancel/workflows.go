package cancel

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// WorkflowGVR is Argo's Workflow, stopped when its CRD is served.
var WorkflowGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "workflows"}

// argoServed reports whether the API server serves Argo's Workflows (asked at most every 30s;
// the discovery call is made outside the lock).
func (p *Protocol) argoServed() bool {
	if p.o.Dynamic == nil {
		return false
	}
	p.mu.Lock()
	fresh, served := p.o.Now().Sub(p.argo.checked) < 30*time.Second, p.argo.served
	p.mu.Unlock()
	if fresh {
		return served
	}
	served = false
	if l, err := p.o.Kube.Discovery().ServerResourcesForGroupVersion(WorkflowGVR.GroupVersion().String()); err == nil {
		for _, r := range l.APIResources {
			served = served || r.Name == WorkflowGVR.Resource
		}
	}
	p.mu.Lock()
	p.argo.checked, p.argo.served = p.o.Now(), served
	p.mu.Unlock()
	return served
}

// Owner is a run whose Argo Workflows a cancel stops: those it owns (UID), or labelled
// Label=Name.
type Owner struct {
	UID         types.UID
	Label, Name string
}

// StopWorkflows shuts down (spec.shutdown=Terminate) and deletes the Argo Workflows of the run
// owners[0] (queue key k, in ns) and of the other owners (an OrchestrationRun's steps), all found
// in one list, counting them for owners[0]. It returns what is left. Both kinds' runs can have
// Workflows.
func (p *Protocol) StopWorkflows(ctx context.Context, k, ns string, owners ...Owner) ([]string, error) {
	if len(owners) == 0 || !p.argoServed() {
		return nil, nil
	}
	wfs := p.o.Dynamic.Resource(WorkflowGVR).Namespace(ns)
	l, err := wfs.List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list Workflows in %s: %w", ns, err)
	}
	ours := func(labels map[string]string, refs []metav1.OwnerReference) bool {
		for _, o := range owners {
			if labels[o.Label] == o.Name {
				return true
			}
			for _, ref := range refs {
				if ref.UID == o.UID {
					return true
				}
			}
		}
		return false
	}
	var left []string
	for _, wf := range l.Items {
		if !ours(wf.GetLabels(), wf.GetOwnerReferences()) {
			continue
		}
		left = append(left, "Workflow "+wf.GetName())
		if wf.GetDeletionTimestamp() != nil {
			continue
		}
		_, err := wfs.Patch(ctx, wf.GetName(), types.MergePatchType, []byte(`{"spec":{"shutdown":"Terminate"}}`), metav1.PatchOptions{FieldManager: "agentplane-cancel-propagator"})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("shut down Workflow %s/%s: %w", ns, wf.GetName(), err)
		}
		err = wfs.Delete(ctx, wf.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete Workflow %s/%s: %w", ns, wf.GetName(), err)
		}
		p.Record(owners[0].UID, "Workflow", 1)
	}
	if len(left) > 0 {
		// Workflows are not watched: look again shortly.
		p.o.EnqueueAfter(k, time.Second)
	}
	return left, nil
}
