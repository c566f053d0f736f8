//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/agentrun"
)

// refuseCancel writes what cancel-propagator writes when it sees a cancel while cancel support is
// off: Cancelled=False, reason CancelDisabled.
func refuseCancel(t *testing.T, resource, ns, name string) {
	t.Helper()
	gv := agentsv1alpha1.GroupVersion
	if resource == "orchestrationruns" {
		gv = orchv1alpha1.GroupVersion
	}
	rc, err := kubeclient.RESTClientFor(env.Config, gv)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":%q,"message":"cancel support is disabled","lastTransitionTime":%q}]}}`,
		reasons.CondCancelled, reasons.CancelDisabled, time.Now().UTC().Format(time.RFC3339))
	if err := rc.Patch(types.MergePatchType).Namespace(ns).Resource(resource).Name(name).SubResource("status").
		Body([]byte(patch)).Do(context.Background()).Error(); err != nil {
		t.Fatalf("refuse the cancel of %s %s: %v", resource, name, err)
	}
}

// TestACancelRefusedWhileCancelWasOffStopsNothing (#32 item 1): a run whose spec.cancel
// cancel-propagator refused because cancel support was off (Cancelled=False, reason CancelDisabled)
// runs on as if it had not been asked: its Job is created (status-writer grants the start claim)
// and it reaches Succeeded, and an OrchestrationRun's step starts. A cancel not refused starts
// nothing.
func TestACancelRefusedWhileCancelWasOffStopsNothing(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	create(t, "orchestrations", ns, orchestration(ns, "one", step("only")))
	for _, name := range []string{"refused", "accepted"} {
		ar := jobRun(ns, name, "codex")
		ar.Spec.Cancel = true
		create(t, "agentruns", ns, ar)
		or := orchRun(ns, name+"-or", "one")
		or.Spec.Cancel = true
		create(t, "orchestrationruns", ns, or)
	}
	refuseCancel(t, "agentruns", ns, "refused")
	refuseCancel(t, "orchestrationruns", ns, "refused-or")
	c := startController(t, ns, nil)

	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "refused"), "", 1))
	fakePodRunning(t, j)
	finishJob(t, ns, j.Name, true)
	waitPhase(t, ns, "refused", agentsv1alpha1.PhaseSucceeded, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, "the refused OrchestrationRun's step started", func() error {
		if !childExists(t, ns, "refused-or-only") {
			return fmt.Errorf("no step run")
		}
		return nil
	})

	settle(t, c, "AgentRun", ns, "accepted")
	settle(t, c, "OrchestrationRun", ns, "accepted-or")
	for _, j := range jobsIn(t, ns) {
		if j.Labels[agentsv1alpha1.LabelAgentRun] == "accepted" {
			t.Errorf("Job %s: a cancelled run started", j.Name)
		}
	}
	if childExists(t, ns, "accepted-or-only") {
		t.Error("a cancelled OrchestrationRun started a step")
	}
}

// TestAStepOfACancelledOrchestrationRunIsLeftToTheCancel: once its OrchestrationRun's cancel is in
// effect, a step whose own spec.cancel has not arrived yet (cancel-propagator sets it while it
// deletes the step's Jobs, not before) is left to the cancel: its Job failing, as the Job
// controller fails a Job whose pod the cancel deleted, is not written over the step, which the
// cancel writes Cancelled instead. If the cancel is refused, the step is run-controller's again.
func TestAStepOfACancelledOrchestrationRunIsLeftToTheCancel(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	create(t, "orchestrations", ns, orchestration(ns, "one", step("only")))
	create(t, "orchestrationruns", ns, orchRun(ns, "stopping", "one"))
	c := startController(t, ns, nil)
	testenv.Eventually(t, 20*time.Second, "the step's run", func() error {
		if !childExists(t, ns, "stopping-only") {
			return fmt.Errorf("no step run yet")
		}
		return nil
	})
	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "stopping-only"), "", 1))
	fakePodRunning(t, j)
	waitPhase(t, ns, "stopping-only", agentsv1alpha1.PhaseRunning, 30*time.Second)

	rc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Patch(types.MergePatchType).Namespace(ns).Resource("orchestrationruns").Name("stopping").
		Body([]byte(`{"spec":{"cancel":true}}`)).Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
	settle(t, c, "AgentRun", ns, "stopping-only") // orders this goroutine after Run's filling of the cache maps
	testenv.Eventually(t, 20*time.Second, "the controller's cache shows the OrchestrationRun's cancel", func() error {
		if or, ok := c.OrchRun(ns, "stopping"); !ok || !or.Spec.Cancel {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	finishJob(t, ns, j.Name, false)
	testenv.Eventually(t, 20*time.Second, "the controller's cache shows the Job failed", func() error {
		if cj, ok := c.Job(ns, j.Name); !ok || len(cj.Status.Conditions) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	settle(t, c, "AgentRun", ns, "stopping-only")
	if ar := getRun(t, ns, "stopping-only"); ar.Status.Phase != agentsv1alpha1.PhaseRunning || ar.Spec.Cancel {
		t.Errorf("the step of a cancelled OrchestrationRun: phase %s (want Running: the cancel writes it), spec.cancel %v", ar.Status.Phase, ar.Spec.Cancel)
	}
	// A cancel refused (cancel support off) gives the step back to run-controller, though nothing
	// about the step itself changes: its failed Job is recorded.
	refuseCancel(t, "orchestrationruns", ns, "stopping")
	waitPhase(t, ns, "stopping-only", agentsv1alpha1.PhaseFailed, 30*time.Second)
}
