// Package jobresult is the job-result hold on run-controller's Jobs (seed 002): the
// agents.proompteng.ai/job-result finalizer, and the one safe way to release it. job-gc
// releases holds as results are recorded; `agentctl jobs release-holds` releases them all by
// hand (after job-gc is uninstalled, for one).
package jobresult

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// Selector selects run-controller's Jobs, the only ones that carry the hold.
const Selector = agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController

// Index is the position of the job-result finalizer in j's finalizers, or -1.
func Index(j *batchv1.Job) int {
	for i, f := range j.Finalizers {
		if f == agentsv1alpha1.FinalizerJobResult {
			return i
		}
	}
	return -1
}

// ReleasePatch is the JSON patch that removes the job-result finalizer from j (RemovalPatch).
func ReleasePatch(j *batchv1.Job) ([]byte, error) {
	if Index(j) < 0 {
		return nil, fmt.Errorf("Job %s/%s holds no %s finalizer", j.Namespace, j.Name, agentsv1alpha1.FinalizerJobResult)
	}
	return RemovalPatch(j.Finalizers, agentsv1alpha1.FinalizerJobResult)
}

// RemovalPatch is the JSON patch that removes finalizer from an object whose finalizers were
// read as have. It tests the finalizer is still at the index read, so the server refuses it
// (422) if the list changed since: no other finalizer is ever removed by mistake. It is the one
// used for every hold the control plane releases (the job-result hold, the run archive's).
func RemovalPatch(have []string, finalizer string) ([]byte, error) {
	i := slices.Index(have, finalizer)
	if i < 0 {
		return nil, fmt.Errorf("no %s finalizer to remove", finalizer)
	}
	return json.Marshal([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": finalizer},
		{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
	})
}

// Held lists the run-controller Jobs in namespace (metav1.NamespaceAll for all) that carry the
// hold, by namespace and name.
func Held(ctx context.Context, kc kubernetes.Interface, namespace string) ([]batchv1.Job, error) {
	list, err := kc.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		return nil, fmt.Errorf("list Jobs: %w", err)
	}
	var held []batchv1.Job
	for _, j := range list.Items {
		if Index(&j) >= 0 {
			held = append(held, j)
		}
	}
	return held, nil
}

// ReleaseAll removes the hold from every run-controller Job in namespace (metav1.NamespaceAll for
// all), with ReleasePatch as fieldManager, calling released for each Job it released. A Job whose
// finalizers changed since it was listed is read again (up to three times); one gone is skipped.
// dryRun sends each patch as a server-side dry run (the API server checks it, nothing changes).
// It returns how many it released, and stops at the first other error.
func ReleaseAll(ctx context.Context, kc kubernetes.Interface, namespace, fieldManager string, dryRun bool, released func(*batchv1.Job)) (int, error) {
	list, err := kc.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		return 0, fmt.Errorf("list Jobs: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	n := 0
	for i := range list.Items {
		j := &list.Items[i]
		for attempt := 0; Index(j) >= 0; attempt++ {
			patch, _ := ReleasePatch(j)
			_, err = kc.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.JSONPatchType, patch, opts)
			if err == nil {
				n++
				released(j)
				break
			}
			if apierrors.IsNotFound(err) {
				break
			}
			if !apierrors.IsInvalid(err) || attempt >= 3 {
				return n, fmt.Errorf("release Job %s/%s: %w (%d released so far)", j.Namespace, j.Name, err, n)
			}
			// The finalizer list changed since the list: read it again.
			if j, err = kc.BatchV1().Jobs(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{}); err != nil {
				if apierrors.IsNotFound(err) {
					break
				}
				return n, fmt.Errorf("read Job %s/%s: %w", list.Items[i].Namespace, list.Items[i].Name, err)
			}
		}
	}
	return n, nil
}
