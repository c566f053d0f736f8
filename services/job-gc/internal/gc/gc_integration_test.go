//go:build integration

package gc

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/testenv"
)

var env *testenv.Kube

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.StartKube(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// A Job deleted by hand (or by its TTL, or a cascading delete) stays readable while its run is
// unfinished, and goes once the run's status records the outcome; a Job whose run is gone is
// released.
func TestAJobIsKeptUntilItsResultIsRecorded(t *testing.T) {
	ctx := context.Background()
	ns := "gc"
	kc := env.Client
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := kube.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	run := &agentsv1alpha1.AgentRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec:       agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}},
	}
	if err := rc.Post().Namespace(ns).Resource("agentruns").Body(run).Do(ctx).Into(run); err != nil {
		t.Fatal(err)
	}
	job := func(name string, ownerUID string) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: []string{agentsv1alpha1.FinalizerJobResult},
				Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun",
					Name: "r", UID: run.UID, Controller: ptr.To(true)}}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
		}
		if ownerUID != "" {
			j.OwnerReferences[0].UID = "00000000-0000-0000-0000-000000000000"
			j.OwnerReferences[0].Name = ownerUID
		}
		out, err := kc.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	held := job("held", "")
	orphan := job("orphan", "gone-run")
	g, err := New(kc, env.Config, []string{ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(cctx) }()
	defer func() { cancel(); <-done }()

	gone := func(name string) error {
		_, err := kc.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	}
	for _, n := range []string{"held", "orphan"} {
		if err := kc.BatchV1().Jobs(ns).Delete(ctx, n, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "the orphan's hold is released", func() error { return gone("orphan") })
	time.Sleep(time.Second)
	j, err := kc.BatchV1().Jobs(ns).Get(ctx, "held", metav1.GetOptions{})
	if err != nil || j.DeletionTimestamp == nil {
		t.Fatalf("an unrecorded Job must stay readable while being deleted: %v %+v", err, j)
	}
	// Running is not a result.
	run.Status = agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "held", UID: string(held.UID)}}
	if err := rc.Put().Namespace(ns).Resource("agentruns").Name("r").SubResource("status").Body(run).Do(ctx).Into(run); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := gone("held"); err == nil {
		t.Fatal("released while the run was Running")
	}
	now := metav1.Now()
	run.Status.Phase, run.Status.FinishedAt = "Succeeded", &now
	if err := rc.Put().Namespace(ns).Resource("agentruns").Name("r").SubResource("status").Body(run).Do(ctx).Into(run); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "released once the result is recorded", func() error { return gone("held") })
	_ = orphan
}
