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

// StopWorkflows shuts down (spec.shutdown=Terminate) and deletes the Argo Workflows of a run (queue
// key k, in ns, with uid): those it owns, or labelled label=name. It returns what is left. Both
// kinds' runs can have Workflows.
func (p *Protocol) StopWorkflows(ctx context.Context, k, ns string, uid types.UID, label, name string) ([]string, error) {
	if !p.argoServed() {
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
	var left []string
	for _, wf := range l.Items {
		ours := wf.GetLabels()[label] == name
		for _, ref := range wf.GetOwnerReferences() {
			ours = ours || ref.UID == uid
		}
		if !ours {
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
		p.Record(uid, "Workflow", 1)
	}
	if len(left) > 0 {
		// Workflows are not watched: look again shortly.
		p.o.EnqueueAfter(k, time.Second)
	}
	return left, nil
}
