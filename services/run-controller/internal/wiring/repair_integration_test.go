//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/agentrun"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// TestHoldsNobodyReleasesAreReleasedWhenJobGCIsNotInstalled (#32 item 8): first today's
// behaviour, with no job-gc: run-controller puts the job-result finalizer on a run's Job, the run
// succeeds, the Job is deleted (as its TTL does) and stays Terminating, held. Then the new version,
// told job-gc is not installed (JobFinalizer off), releases the hold of the finished run's Job,
// which goes; a running run's Job keeps its hold until its run finishes.
func TestHoldsNobodyReleasesAreReleasedWhenJobGCIsNotInstalled(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	var done, running string
	t.Run("today's behaviour leaves a Job Terminating", func(t *testing.T) {
		startController(t, ns, nil) // JobFinalizer on; stopped when this subtest ends
		create(t, "agentruns", ns, jobRun(ns, "finished", "codex"))
		create(t, "agentruns", ns, jobRun(ns, "running", "codex"))
		j := waitJob(t, ns, agentrun.JobName(waitPhase(t, ns, "finished", agentsv1alpha1.PhasePending, 20*time.Second), "", 1))
		done = j.Name
		fakePodRunning(t, j)
		finishJob(t, ns, j.Name, true)
		waitPhase(t, ns, "finished", agentsv1alpha1.PhaseSucceeded, 30*time.Second)
		r := waitJob(t, ns, agentrun.JobName(waitPhase(t, ns, "running", agentsv1alpha1.PhasePending, 20*time.Second), "", 1))
		running = r.Name
		for _, name := range []string{done, running} {
			if err := kc.BatchV1().Jobs(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
				t.Fatal(err)
			}
			got, err := kc.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil || got.DeletionTimestamp == nil || len(got.Finalizers) == 0 {
				t.Fatalf("Job %s after its deletion: %v %+v, want it Terminating, held", name, err, got.ObjectMeta)
			}
		}
	})
	if t.Failed() {
		return
	}
	c := startController(t, ns, func(cfg *core.Config) { cfg.JobFinalizer = false })
	testenv.Eventually(t, 30*time.Second, "the finished run's held Job released and gone", func() error {
		if _, err := kc.BatchV1().Jobs(ns).Get(context.Background(), done, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Job %s still there (%v)", done, err)
		}
		return nil
	})
	settle(t, c, "AgentRun", ns, "running")
	if got, err := kc.BatchV1().Jobs(ns).Get(context.Background(), running, metav1.GetOptions{}); err != nil || len(got.Finalizers) == 0 {
		t.Errorf("the running run's Job lost its hold before its outcome was recorded: %v %+v", err, got)
	}
}
