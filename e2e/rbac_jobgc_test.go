//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestJobGCChartRBACIsEnoughAndNoMore installs the job-gc chart's RBAC on a real API server and
// runs the binary as its ServiceAccount (impersonated), with leader election on: it releases a
// recorded Job's hold, deletes a finished run and its Job at the end of the retention, and fails
// a run whose Job is gone (through status-writer), in the namespace it is given, and may not
// touch anything else.
func TestJobGCChartRBACIsEnoughAndNoMore(t *testing.T) {
	k8s, kubectl := chartOnAPIServer(t, "job-gc", "granted", []string{"granted", "elsewhere"}, "--set", "controller.namespaces={granted}")
	ctx := context.Background()
	rc, err := kubeclient.RESTClientFor(k8s.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	newRun := func(name string, st agentsv1alpha1.AgentRunStatus) *agentsv1alpha1.AgentRun {
		t.Helper()
		ar := &agentsv1alpha1.AgentRun{
			TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "granted"},
			Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"},
				TTLSecondsAfterFinished: ptr.To[int32](1)},
		}
		if err := rc.Post().Namespace("granted").Resource("agentruns").Body(ar).Do(ctx).Into(ar); err != nil {
			t.Fatal(err)
		}
		ar.Status, ar.Status.ObservedGeneration = st, ar.Generation
		if err := rc.Put().Namespace("granted").Resource("agentruns").Name(name).SubResource("status").Body(ar).Do(ctx).Into(ar); err != nil {
			t.Fatal(err)
		}
		return ar
	}
	now := metav1.Now()
	done := newRun("done", agentsv1alpha1.AgentRunStatus{Phase: "Succeeded", FinishedAt: &now})
	if _, err := k8s.Client.BatchV1().Jobs("granted").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "done-job", Finalizers: []string{agentsv1alpha1.FinalizerJobResult},
			Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun",
				Name: "done", UID: done.UID, Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newRun("lost", agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "lost-job", Namespace: "granted", UID: "33333333-3333-3333-3333-333333333333"}})

	// status-writer and event-emitter (with their Redis) run as the API server's admin.
	w, err := testenv.StartWriters(k8s)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	dir := t.TempDir()
	const sa = "system:serviceaccount:granted:job-gc"
	gc, err := testenv.StartService(binPath(t, "job-gc"), dir, "KUBECONFIG="+impersonating(t, k8s.Kubeconfig, sa),
		"POD_NAMESPACE=granted", "POD_NAME=job-gc-0", "JANGAR_AGENTS_CONTROLLER_NAMESPACES=granted", "JANGAR_JOB_GC_MISSING_JOB_GRACE_SECONDS=1",
		"JANGAR_LEADER_ELECTION_ENABLED=true", "JANGAR_STATUS_WRITER_ADDR="+w.StatusAddr, "JANGAR_EVENT_EMITTER_ADDR="+w.EventsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Stop()
	eventually(t, 60*time.Second, "the finished run and its Job deleted, the lost run failed", func() error {
		if _, err := k8s.Client.BatchV1().Jobs("granted").Get(ctx, "done-job", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errorf("done-job: %v\n%s", err, gc.Log())
		}
		ar := &agentsv1alpha1.AgentRun{}
		if err := rc.Get().Namespace("granted").Resource("agentruns").Name("done").Do(ctx).Into(ar); !apierrors.IsNotFound(err) {
			return errorf("run done: %v", err)
		}
		if err := rc.Get().Namespace("granted").Resource("agentruns").Name("lost").Do(ctx).Into(ar); err != nil || ar.Status.Reason != "WorkflowJobMissing" {
			return errorf("run lost: %v %s/%s\n%s", err, ar.Status.Phase, ar.Status.Reason, gc.Log())
		}
		return nil
	})
	if strings.Contains(gc.Log(), "forbidden") {
		t.Errorf("job-gc hit a permission it lacks:\n%s", gc.Log())
	}
	for _, probe := range [][]string{
		{"create", "jobs", "-n", "granted"}, {"update", "jobs", "-n", "granted"}, {"list", "jobs", "-n", "elsewhere"},
		{"list", "secrets", "-n", "granted"}, {"delete", "pods", "-n", "granted"}, {"create", "agentruns.agents.proompteng.ai", "-n", "granted"},
		{"patch", "agentruns.agents.proompteng.ai", "-n", "elsewhere"}, {"update", "agentruns.agents.proompteng.ai/status", "-n", "granted"},
		{"delete", "agentruns.agents.proompteng.ai", "-n", "elsewhere"}, {"create", "events", "-n", "granted"},
		// Archiving off: nothing it would capture may be read.
		{"list", "events", "-n", "granted"}, {"list", "pods", "-n", "granted"}, {"get", "pods/log", "-n", "granted"},
	} {
		out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa}, probe...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the ServiceAccount may %v: %q", probe, out)
		}
	}
}

// TestJobGCChartArchiveRBACIsEnoughAndNoMore: with archive.enabled the chart's Role lets job-gc,
// running as its ServiceAccount against a real PostgreSQL, hold a run with the archive's
// finalizer and write it, with its Events, its Job's outcome and its pod's log (which, with no
// node here, says why it could not be read, not that it was forbidden), before retention deletes
// it; and it may still not read Secrets or anything in another namespace.
func TestJobGCChartArchiveRBACIsEnoughAndNoMore(t *testing.T) {
	k8s, kubectl := chartOnAPIServer(t, "job-gc", "granted", []string{"granted", "elsewhere"}, "--set", "controller.namespaces={granted}",
		"--set", "archive.enabled=true", "--set", "archive.url=postgres://agentplane@db:5432/agentplane")
	ctx := context.Background()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pg.Close() }()
	rc, err := kubeclient.RESTClientFor(k8s.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	ar := &agentsv1alpha1.AgentRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "granted"},
		Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"},
			TTLSecondsAfterFinished: ptr.To[int32](1)},
	}
	if err := rc.Post().Namespace("granted").Resource("agentruns").Body(ar).Do(ctx).Into(ar); err != nil {
		t.Fatal(err)
	}
	job, err := k8s.Client.BatchV1().Jobs("granted").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "kept-job", Finalizers: []string{agentsv1alpha1.FinalizerJobResult},
			Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun",
				Name: "kept", UID: ar.UID, Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod needs its ServiceAccount (no controller-manager here makes "default").
	if _, err := k8s.Client.CoreV1().ServiceAccounts("granted").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := k8s.Client.CoreV1().Pods("granted").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kept-job-pod", Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	if _, err := k8s.Client.CoreV1().Events("granted").Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kept.", Namespace: "granted"},
		InvolvedObject: corev1.ObjectReference{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: "granted",
			Name: "kept", UID: ar.UID},
		Reason: "JobCreated", Message: "created Job kept-job", Type: corev1.EventTypeNormal, Count: 1, FirstTimestamp: now, LastTimestamp: now,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ar.Status = agentsv1alpha1.AgentRunStatus{Phase: "Succeeded", FinishedAt: &now, ObservedGeneration: ar.Generation}
	if err := rc.Put().Namespace("granted").Resource("agentruns").Name("kept").SubResource("status").Body(ar).Do(ctx).Into(ar); err != nil {
		t.Fatal(err)
	}

	w, err := testenv.StartWriters(k8s)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const sa = "system:serviceaccount:granted:job-gc"
	gc, err := testenv.StartService(binPath(t, "job-gc"), t.TempDir(), "KUBECONFIG="+impersonating(t, k8s.Kubeconfig, sa),
		"POD_NAMESPACE=granted", "POD_NAME=job-gc-0", "JANGAR_AGENTS_CONTROLLER_NAMESPACES=granted",
		"JANGAR_STATUS_WRITER_ADDR="+w.StatusAddr, "JANGAR_EVENT_EMITTER_ADDR="+w.EventsAddr,
		"JANGAR_ARCHIVE_URL=postgres://"+pg.User+"@"+pg.Addr+"/postgres?sslmode=disable", "JANGAR_ARCHIVE_PASSWORD="+pg.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Stop()
	eventually(t, 60*time.Second, "the run archived, then deleted with its Job", func() error {
		if err := rc.Get().Namespace("granted").Resource("agentruns").Name("kept").Do(ctx).Error(); !apierrors.IsNotFound(err) {
			return errorf("run kept: %v\n%s", err, gc.Log())
		}
		return nil
	})
	record, err := pg.Query(ctx, "SELECT record::text FROM runs WHERE name = 'kept'")
	if err != nil || record == "" {
		t.Fatalf("the archived row: %v\n%s", err, gc.Log())
	}
	for _, want := range []string{`"JobCreated"`, `"kept-job"`, `"kept-job-pod"`} {
		if !strings.Contains(record, want) {
			t.Errorf("the archived record lacks %s: %s", want, record)
		}
	}
	if strings.Contains(record, "forbidden") || strings.Contains(gc.Log(), "forbidden") {
		t.Errorf("job-gc hit a permission it lacks:\nrecord %s\nlog %s", record, gc.Log())
	}
	for _, probe := range [][]string{
		{"list", "secrets", "-n", "granted"}, {"get", "secrets", "-n", "granted"}, {"list", "events", "-n", "elsewhere"},
		{"list", "pods", "-n", "elsewhere"}, {"get", "pods/log", "-n", "elsewhere"}, {"delete", "pods", "-n", "granted"},
		{"get", "pods/exec", "-n", "granted"}, {"create", "events", "-n", "granted"},
	} {
		out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa}, probe...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the ServiceAccount may %v: %q", probe, out)
		}
	}
}
