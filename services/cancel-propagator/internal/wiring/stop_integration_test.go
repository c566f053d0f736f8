//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

// An OrchestrationRun of three running steps, each with a Job held by run-controller's
// job-result finalizer and a running pod: the cancel deletes every Job without suspending it (the
// Job controller starts no pod for a Job being deleted), deletes the pods at once (the garbage
// collector leaves a finalizer-held Job's pods alone), and ends with everything Cancelled.
func TestAStepsJobsAreDeletedUnsuspendedAndTheirPodsAtOnce(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","metadata":{"name":"wide"},"spec":{"orchestrationRef":{"name":"plan"}}}`)
	or, err := f.getOR("wide")
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*batchv1.Job
	for i := range 3 {
		name := fmt.Sprintf("wide-s%d", i)
		f.apply(fmt.Sprintf(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":%q,
			"labels":{"orchestration.proompteng.ai/run":"wide"},
			"ownerReferences":[{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","name":"wide","uid":%q,"controller":true}]},
			"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`, name, or.UID))
		ar, err := f.getAR(name)
		if err != nil {
			t.Fatal(err)
		}
		j := f.job(name+"-job", ar)
		held, err := env.Client.BatchV1().Jobs(f.ns).Patch(context.Background(), j.Name, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["`+agentsv1alpha1.FinalizerJobResult+`"]}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, held)
		f.pod(name+"-pod", held, "test/stopping")
		f.setARStatus(name, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: j.Name, Namespace: f.ns, UID: string(j.UID)}})
	}
	f.start(Config{Enabled: true, Timeout: time.Minute})
	f.cancel("orchestrationruns", "wide")
	testenv.Eventually(t, 30*time.Second, "every Job deleted, none suspended, every pod deleted", func() error {
		for i, j := range jobs {
			cur, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), j.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.DeletionTimestamp == nil {
				return fmt.Errorf("Job %s not deleted", j.Name)
			}
			if cur.Spec.Suspend != nil && *cur.Spec.Suspend {
				t.Fatalf("Job %s was suspended: a Job being deleted starts no pod, so the patch is a wasted request", j.Name)
			}
			if left := f.p.protocol.LeftToGC(j.UID); left != 0 {
				t.Fatalf("the pods of finalizer-held Job %s are left to the garbage collector for %s, which never deletes them while the Job is held", j.Name, left)
			}
			pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), fmt.Sprintf("wide-s%d-pod", i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pod.DeletionTimestamp == nil {
				return fmt.Errorf("pod %s not deleted", pod.Name)
			}
		}
		return nil
	})
	for i := range jobs {
		f.releasePod(fmt.Sprintf("wide-s%d-pod", i))
	}
	testenv.Eventually(t, 30*time.Second, "the run and its steps Cancelled", func() error {
		for i := range jobs {
			if ar, err := f.getAR(fmt.Sprintf("wide-s%d", i)); err != nil || ar.Status.Phase != "Cancelled" {
				return fmt.Errorf("step %d: %v %+v", i, err, ar.Status)
			}
		}
		if or, err := f.getOR("wide"); err != nil || or.Status.Phase != "Cancelled" {
			return fmt.Errorf("run: %v %+v", err, or.Status)
		}
		return nil
	})
	if got := f.metric("agentplane_cancel_propagator_children_terminated_total", "kind", "Job"); got != 3 {
		t.Errorf("Jobs terminated = %v, want 3", got)
	}
	if got := f.metric("agentplane_cancel_propagator_children_terminated_total", "kind", "Pod"); got != 3 {
		t.Errorf("pods terminated = %v, want 3", got)
	}
}

// A Job without finalizers is gone as soon as it is deleted, and the garbage collector deletes its
// pods: the cancel leaves them to it for cancel.GCWait before deleting one still running itself
// (envtest runs no garbage collector, so here the cancel does, after the wait).
func TestAPodOfAJobWithoutFinalizersIsLeftToTheGarbageCollectorFirst(t *testing.T) {
	f := newFixture(t)
	_, j := f.runningAgentRun("plain", "test/stopping")
	f.start(Config{Enabled: true, Timeout: time.Minute})
	f.cancel("agentruns", "plain")
	var jobGone time.Time
	testenv.Eventually(t, 30*time.Second, "the Job gone", func() error {
		if _, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), j.Name, metav1.GetOptions{}); !gone(err) {
			return fmt.Errorf("still there: %v", err)
		}
		jobGone = time.Now()
		return nil
	})
	var podDeleted time.Time
	testenv.Eventually(t, 30*time.Second, "the pod deleted", func() error {
		pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), "plain-pod", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.DeletionTimestamp == nil {
			return fmt.Errorf("not deleted yet")
		}
		podDeleted = time.Now()
		return nil
	})
	// The Job's disappearance is seen at most a poll after it happened; the pod's deletion comes
	// GCWait (2 s) after it.
	if waited := podDeleted.Sub(jobGone); waited < time.Second {
		t.Errorf("the pod was deleted %s after its Job went, want about %s (left to the garbage collector first)", waited, cancel.GCWait)
	}
	f.releasePod("plain-pod")
	testenv.Eventually(t, 30*time.Second, "the run Cancelled", func() error {
		if ar, err := f.getAR("plain"); err != nil || ar.Status.Phase != "Cancelled" {
			return fmt.Errorf("%v %+v", err, ar.Status)
		}
		return nil
	})
}
