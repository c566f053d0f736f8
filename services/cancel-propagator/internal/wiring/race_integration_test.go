//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestWhatBeganBeforeTheCancelIsStoppedAfterIt (#32 item 7): the interleaving where
// run-controller claimed a start before the cancel and creates the Job (or the step run) after
// the cancel was carried out, forced by order, not by timing: each run is cancelled and seen
// Cancelled with nothing under it, and only then does its Job, or its step AgentRun, appear. The
// Job is stopped (deleted) and the step is cancelled, so no Job runs and no step
// stays Pending.
func TestWhatBeganBeforeTheCancelIsStoppedAfterIt(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"late-job"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	f.apply(`{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","metadata":{"name":"late-step"},"spec":{"orchestrationRef":{"name":"plan"}}}`)
	f.start(Config{Enabled: true, Timeout: time.Minute})
	f.cancel("agentruns", "late-job")
	f.cancel("orchestrationruns", "late-step")
	testenv.Eventually(t, 30*time.Second, "both runs Cancelled with nothing under them", func() error {
		ar, err := f.getAR("late-job")
		if err != nil || ar.Status.Phase != "Cancelled" {
			return fmt.Errorf("AgentRun: %v %+v", err, ar.Status)
		}
		or, err := f.getOR("late-step")
		if err != nil || or.Status.Phase != "Cancelled" {
			return fmt.Errorf("OrchestrationRun: %v %+v", err, or.Status)
		}
		return nil
	})

	ar, _ := f.getAR("late-job")
	j := f.job("late-job-1", ar)
	or, _ := f.getOR("late-step")
	f.apply(fmt.Sprintf(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"late-step-a",
		"labels":{"orchestration.proompteng.ai/run":"late-step"},
		"ownerReferences":[{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","name":"late-step","uid":%q,"controller":true}]},
		"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`, or.UID))

	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "the late Job stopped", func() error {
		cur, err := env.Client.BatchV1().Jobs(f.ns).Get(ctx, j.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case cur.DeletionTimestamp == nil:
			return fmt.Errorf("Job %s not deleted", cur.Name)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "the late step cancelled and Cancelled", func() error {
		step, err := f.getAR("late-step-a")
		if err != nil || !step.Spec.Cancel || step.Status.Phase != "Cancelled" {
			return fmt.Errorf("step: %v cancel=%v %+v", err, step.Spec.Cancel, step.Status)
		}
		return nil
	})
}
