//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestCancelPropagatorChartRBACIsEnoughAndNoMore installs the cancel-propagator chart's RBAC on a
// real API server and runs the binary as its ServiceAccount (impersonated), with leader election
// on: it cancels an OrchestrationRun (setting cancel on its AgentRun) and an AgentRun (deleting
// its Job and its pod) in the namespace it is given, and may not touch
// anything else.
func TestCancelPropagatorChartRBACIsEnoughAndNoMore(t *testing.T) {
	root := repoRoot(t)
	k8s, kubectl := chartOnAPIServer(t, "cancel-propagator", "granted", []string{"granted", "elsewhere"}, "--set", "controller.namespaces={granted}")
	ctx := context.Background()
	for _, f := range []string{"agent.yaml", "agentrun.yaml", "orchestration.yaml", "orchestrationrun.yaml"} {
		if out, err := kubectl("apply", "-n", "granted", "-f", root+"/examples/"+f); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	// A step's AgentRun of the OrchestrationRun, and a Job with a pod for the AgentRun, as
	// run-controller and the Job controller would have made them.
	orUID, _ := kubectl("-n", "granted", "get", "orchestrationrun", "plan-and-implement-1", "-o", "jsonpath={.metadata.uid}")
	child := `{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"plan-and-implement-1-plan","ownerReferences":[{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","name":"plan-and-implement-1","uid":"` + strings.TrimSpace(orUID) + `","controller":true}]},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`
	if out, err := kubectlStdin(ctx, t, mustExist(t, root+"/bin/envtest/kubectl", "tools"), k8s.Kubeconfig, strings.Replace(child, `"metadata":{`, `"metadata":{"namespace":"granted",`, 1)); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	runUID, _ := kubectl("-n", "granted", "get", "agentrun", "hello", "-o", "jsonpath={.metadata.uid}")
	job, err := k8s.Client.BatchV1().Jobs("granted").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-job", Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Name: "hello",
				UID: typesUID(runUID), Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k8s.Client.CoreV1().Pods("granted").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-pod", Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController,
			batchv1.ControllerUidLabel: string(job.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// status-writer and event-emitter (with their Redis) run as the API server's admin.
	w, err := testenv.StartWriters(k8s)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	dir := t.TempDir()
	const sa = "system:serviceaccount:granted:cancel-propagator"
	cp, err := testenv.StartService(binPath(t, "cancel-propagator"), dir, "KUBECONFIG="+impersonating(t, k8s.Kubeconfig, sa),
		"POD_NAMESPACE=granted", "POD_NAME=cancel-propagator-0", "JANGAR_AGENTS_CONTROLLER_NAMESPACES=granted",
		"JANGAR_LEADER_ELECTION_ENABLED=true", "JANGAR_STATUS_WRITER_ADDR="+w.StatusAddr, "JANGAR_EVENT_EMITTER_ADDR="+w.EventsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	for _, res := range []string{"orchestrationrun/plan-and-implement-1", "agentrun/hello"} {
		if out, err := kubectl("-n", "granted", "patch", res, "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	eventually(t, 60*time.Second, "both runs and the step Cancelled, the Job deleted, the pod deleted", func() error {
		for _, res := range []string{"orchestrationrun/plan-and-implement-1", "agentrun/plan-and-implement-1-plan", "agentrun/hello"} {
			if out, _ := kubectl("-n", "granted", "get", res, "-o", "jsonpath={.status.phase}"); out != "Cancelled" {
				full, _ := kubectl("-n", "granted", "get", res, "-o", "yaml")
				return errorf("%s is %q\n%s\n%s", res, out, full, cp.Log())
			}
		}
		j, err := k8s.Client.BatchV1().Jobs("granted").Get(ctx, "hello-job", metav1.GetOptions{})
		if err == nil && j.DeletionTimestamp == nil {
			return errorf("job not deleted")
		}
		if p, err := k8s.Client.CoreV1().Pods("granted").Get(ctx, "hello-pod", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
			return errorf("pod not deleted")
		}
		return nil
	})
	if strings.Contains(cp.Log(), "forbidden") {
		t.Errorf("cancel-propagator hit a permission it lacks:\n%s", cp.Log())
	}
	for _, probe := range [][]string{
		{"create", "jobs", "-n", "granted"}, {"list", "jobs", "-n", "elsewhere"}, {"create", "pods", "-n", "granted"},
		{"list", "secrets", "-n", "granted"}, {"delete", "agentruns.agents.proompteng.ai", "-n", "granted"},
		{"create", "agentruns.agents.proompteng.ai", "-n", "granted"}, {"patch", "orchestrationruns.orchestration.proompteng.ai", "-n", "granted"},
		{"update", "agentruns.agents.proompteng.ai/status", "-n", "granted"}, {"patch", "agentruns.agents.proompteng.ai", "-n", "elsewhere"},
		{"create", "events", "-n", "granted"},
	} {
		out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa}, probe...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the ServiceAccount may %v: %q", probe, out)
		}
	}
}

func typesUID(s string) types.UID { return types.UID(strings.TrimSpace(s)) }
