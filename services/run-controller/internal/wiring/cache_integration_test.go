//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestCachesHoldOnlyWhatTheControllerNeeds (#16 item 2): the controller's informers keep
// objects without managedFields (which the API server does write), and its Job and Pod caches
// hold only the Jobs and Pods it manages, not every one in the namespace.
func TestCachesHoldOnlyWhatTheControllerNeeds(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	// Someone else's Job and Pod in the same namespace.
	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if _, err := kc.BatchV1().Jobs(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := startController(t, ns, nil)
	create(t, "agentruns", ns, jobRun(ns, "cached", "codex"))
	run := waitPhase(t, ns, "cached", agentsv1alpha1.PhasePending, 20*time.Second)
	testenv.Eventually(t, 20*time.Second, "jobRef recorded", func() error {
		if run = getRun(t, ns, "cached"); run.Status.JobRef == nil {
			return fmt.Errorf("no jobRef yet")
		}
		return nil
	})
	j := waitJob(t, ns, run.Status.JobRef.Name)
	fakePodRunning(t, j)
	if len(run.ManagedFields) == 0 || len(j.ManagedFields) == 0 {
		t.Fatalf("the API server wrote no managedFields (run %d, Job %d): the test would prove nothing", len(run.ManagedFields), len(j.ManagedFields))
	}
	cached(t, c, ns, "cached", agentsv1alpha1.PhaseRunning)

	obj, _, _ := c.Runs[ns].GetIndexer().GetByKey(ns + "/cached")
	if mf := obj.(*agentsv1alpha1.AgentRun).ManagedFields; len(mf) != 0 {
		t.Errorf("the cached AgentRun keeps %d managedFields entries", len(mf))
	}
	var jobs, pods []string
	for _, o := range c.Jobs[ns].GetIndexer().List() {
		jb := o.(*batchv1.Job)
		jobs = append(jobs, jb.Name)
		if len(jb.ManagedFields) != 0 {
			t.Errorf("the cached Job %s keeps %d managedFields entries", jb.Name, len(jb.ManagedFields))
		}
	}
	for _, o := range c.Pods[ns].GetIndexer().List() {
		pods = append(pods, o.(*corev1.Pod).Name)
	}
	if len(jobs) != 1 || jobs[0] != j.Name {
		t.Errorf("the Job cache holds %v, want only the run's Job %s", jobs, j.Name)
	}
	if len(pods) != 1 || pods[0] != j.Name+"-pod" {
		t.Errorf("the Pod cache holds %v, want only the run's pod %s-pod", pods, j.Name)
	}
}
