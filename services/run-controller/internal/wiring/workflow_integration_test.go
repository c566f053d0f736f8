//go:build integration

package wiring

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/agentrun"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

func stepStatus(ar *agentsv1alpha1.AgentRun, name string) agentsv1alpha1.WorkflowStepStatus {
	if ar.Status.Workflow != nil {
		for _, s := range ar.Status.Workflow.Steps {
			if s.Name == name {
				return s
			}
		}
	}
	return agentsv1alpha1.WorkflowStepStatus{}
}

// Steps run one Job at a time, in order; a failed attempt is retried after the step's backoff
// with a new Job; status.workflow.steps shows each step's phase, attempt, times and Job.
func TestWorkflowRunsStepsInOrderWithRetries(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	startController(t, ns, nil)
	ar := jobRun(ns, "wf", "codex")
	ar.Spec.Runtime.Type = agentsv1alpha1.RuntimeWorkflow
	ar.Spec.Workflow = &agentsv1alpha1.WorkflowSpec{Steps: []agentsv1alpha1.WorkflowStep{
		{Name: "plan", Retries: 1, RetryBackoffSeconds: 1, TimeoutSeconds: 60},
		{Name: "implement", Parameters: map[string]string{"mode": "write"}},
	}}
	create(t, "agentruns", ns, ar)
	var run *agentsv1alpha1.AgentRun
	testenv.Eventually(t, 20*time.Second, "plan attempt 1", func() error {
		run = getRun(t, ns, "wf")
		if s := stepStatus(run, "plan"); s.Attempt != 1 || s.JobRef == nil {
			return fmt.Errorf("%+v", run.Status.Workflow)
		}
		return nil
	})
	if len(jobsIn(t, ns)) != 1 {
		t.Fatalf("more than one Job while the first step runs: %d", len(jobsIn(t, ns)))
	}
	if s := stepStatus(run, "implement"); s.Phase != agentsv1alpha1.PhasePending || s.JobRef != nil {
		t.Fatalf("implement started early: %+v", s)
	}
	j1 := waitJob(t, ns, agentrun.JobName(run, "plan", 1))
	if *j1.Spec.BackoffLimit != 0 || *j1.Spec.ActiveDeadlineSeconds != 60 || j1.Labels[agentsv1alpha1.LabelWorkflowStep] != "plan" {
		t.Errorf("plan Job: backoffLimit %d deadline %d labels %v", *j1.Spec.BackoffLimit, *j1.Spec.ActiveDeadlineSeconds, j1.Labels)
	}
	fakePodRunning(t, j1)
	waitPhase(t, ns, "wf", agentsv1alpha1.PhaseRunning, 20*time.Second)
	finishJob(t, ns, j1.Name, false)
	testenv.Eventually(t, 20*time.Second, "plan attempt 2 after its backoff", func() error {
		run = getRun(t, ns, "wf")
		if s := stepStatus(run, "plan"); s.Attempt != 2 || s.JobRef == nil || s.JobRef.Name != agentrun.JobName(run, "plan", 2) {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	if run.Status.Phase != agentsv1alpha1.PhaseRunning {
		t.Errorf("a retry is not a failure: phase %s", run.Status.Phase)
	}
	finishJob(t, ns, agentrun.JobName(run, "plan", 2), true)
	testenv.Eventually(t, 20*time.Second, "implement starts after plan", func() error {
		run = getRun(t, ns, "wf")
		if s := stepStatus(run, "implement"); s.JobRef == nil {
			return fmt.Errorf("%+v", run.Status.Workflow)
		}
		return nil
	})
	plan := stepStatus(run, "plan")
	if plan.Phase != agentsv1alpha1.PhaseSucceeded || plan.StartedAt == nil || plan.FinishedAt == nil {
		t.Errorf("plan %+v", plan)
	}
	j3 := waitJob(t, ns, agentrun.JobName(run, "implement", 1))
	envs := map[string]string{}
	for _, e := range j3.Spec.Template.Spec.Containers[0].Env {
		envs[e.Name] = e.Value
	}
	if envs["PARAM_MODE"] != "write" || envs["AGENTRUN_STEP"] != "implement" || *j3.Spec.ActiveDeadlineSeconds != 3600 {
		t.Errorf("implement Job env %v deadline %d", envs, *j3.Spec.ActiveDeadlineSeconds)
	}
	finishJob(t, ns, j3.Name, true)
	run = waitPhase(t, ns, "wf", agentsv1alpha1.PhaseSucceeded, 20*time.Second)
	if run.Status.FinishedAt == nil || run.Status.StartedAt == nil || run.Status.Workflow.Phase != agentsv1alpha1.PhaseSucceeded {
		t.Errorf("status %+v", run.Status)
	}
	if n := len(jobsIn(t, ns)); n != 3 {
		t.Errorf("%d Jobs, want 3 (plan twice, implement once)", n)
	}
}

func TestWorkflowStepOutOfRetriesFailsTheRun(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	startController(t, ns, nil)
	ar := jobRun(ns, "wf-fail", "codex")
	ar.Spec.Runtime.Type = agentsv1alpha1.RuntimeWorkflow
	ar.Spec.Workflow = &agentsv1alpha1.WorkflowSpec{Steps: []agentsv1alpha1.WorkflowStep{{Name: "only"}, {Name: "never"}}}
	create(t, "agentruns", ns, ar)
	var run *agentsv1alpha1.AgentRun
	testenv.Eventually(t, 20*time.Second, "step Job", func() error {
		run = getRun(t, ns, "wf-fail")
		if stepStatus(run, "only").JobRef == nil {
			return fmt.Errorf("%+v", run.Status)
		}
		return nil
	})
	finishJob(t, ns, agentrun.JobName(run, "only", 1), false)
	run = waitPhase(t, ns, "wf-fail", agentsv1alpha1.PhaseFailed, 20*time.Second)
	if run.Status.Reason != reasons.StepFailed || !strings.Contains(run.Status.Message, "step only failed after 1 attempt") {
		t.Errorf("status %+v", run.Status)
	}
	if s := stepStatus(run, "never"); s.JobRef != nil || s.Phase != agentsv1alpha1.PhasePending {
		t.Errorf("never: %+v", s)
	}
	if n := len(jobsIn(t, ns)); n != 1 {
		t.Errorf("%d Jobs, want 1", n)
	}
}

func orchestration(ns, name string, steps ...orchv1alpha1.OrchestrationStep) *orchv1alpha1.Orchestration {
	return &orchv1alpha1.Orchestration{
		TypeMeta:   metav1TypeMeta("Orchestration"),
		ObjectMeta: objectMeta(ns, name),
		Spec:       orchv1alpha1.OrchestrationSpec{Steps: steps},
	}
}

func step(name string, deps ...string) orchv1alpha1.OrchestrationStep {
	return orchv1alpha1.OrchestrationStep{Name: name, Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "codex"}, DependsOn: deps}
}

func orchRun(ns, name, orch string) *orchv1alpha1.OrchestrationRun {
	return &orchv1alpha1.OrchestrationRun{
		TypeMeta:   metav1TypeMeta("OrchestrationRun"),
		ObjectMeta: objectMeta(ns, name),
		Spec:       orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: orch}, Parameters: map[string]string{"issue": "7"}},
	}
}

// finishStep finishes the Job of an OrchestrationRun step's AgentRun (found by its name: a step
// whose pod has not run records its jobRef only after the jobRef delay).
func finishStep(t *testing.T, ns, or, step string, succeed bool) {
	t.Helper()
	name := or + "-" + step
	testenv.Eventually(t, 20*time.Second, "AgentRun "+name, func() error {
		if !childExists(t, ns, name) {
			return fmt.Errorf("no AgentRun %s yet", name)
		}
		return nil
	})
	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, name), "", 1))
	finishJob(t, ns, j.Name, succeed)
	phase := agentsv1alpha1.PhaseSucceeded
	if !succeed {
		phase = agentsv1alpha1.PhaseFailed
	}
	waitPhase(t, ns, name, phase, 20*time.Second)
}

func childExists(t *testing.T, ns, name string) bool {
	t.Helper()
	rc, _ := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	err := rc.Get().Namespace(ns).Resource("agentruns").Name(name).Do(t.Context()).Error()
	return err == nil
}

// TestAStepWhosePodRunsPromptlyGoesToRunningInOneWriteOfEach: a step's start is recorded once,
// in the OrchestrationRun's status (the step Pending, "starting AgentRun ...; waiting for its pod
// to run"), by the claim that also writes the rest of that status; a step whose pod runs within
// the jobRef delay goes from no status to Running, jobRef and all, with no Pending JobCreated
// write of its own, and the OrchestrationRun's step entry goes from the claim's to Running with no
// write between (none that mirrors the run's empty status or its JobCreated). Every version of
// both objects is watched, so a write between would be seen.
func TestAStepWhosePodRunsPromptlyGoesToRunningInOneWriteOfEach(t *testing.T) {
	// A delay no slow machine outlasts between the Job's creation and fakePodRunning.
	stepToRunning(t, time.Minute, []string{"/", "Running/Running"})
}

// TestAStepWhosePodWaitsCostsItsOrchestrationRunNoWrite: a step whose pod has not run when the
// jobRef delay ends is written Pending JobCreated with its jobRef, and its OrchestrationRun's
// step entry still says what the claim wrote ("starting AgentRun ...; waiting for its pod to
// run"): no write of the OrchestrationRun's until the pod runs.
func TestAStepWhosePodWaitsCostsItsOrchestrationRunNoWrite(t *testing.T) {
	stepToRunning(t, time.Nanosecond, []string{"/", "Pending/JobCreated", "Running/Running"})
}

// stepToRunning runs a one-step OrchestrationRun with the jobRef delay given, makes the step's
// pod run once the step's run has the statuses of runWant but its last, and checks both objects'
// statuses on the way to Running.
func stepToRunning(t *testing.T, delay time.Duration, runWant []string) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	startController(t, ns, func(c *core.Config) { c.JobRefDelay = delay })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs := watchAll(ctx, t, ns, agentsv1alpha1.GroupVersion, "agentruns")
	orchRuns := watchAll(ctx, t, ns, orchv1alpha1.GroupVersion, "orchestrationruns")
	create(t, "orchestrations", ns, orchestration(ns, "single", step("a")))
	create(t, "orchestrationruns", ns, orchRun(ns, "one", "single"))
	testenv.Eventually(t, 20*time.Second, "step a's AgentRun", func() error {
		if !childExists(t, ns, "one-a") {
			return fmt.Errorf("no one-a")
		}
		return nil
	})
	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "one-a"), "", 1))
	if len(runWant) > 2 {
		testenv.Eventually(t, 20*time.Second, "the step's run written Pending JobCreated", func() error {
			if st := getRun(t, ns, "one-a").Status; st.Reason != reasons.JobCreated {
				return fmt.Errorf("%s/%s", st.Phase, st.Reason)
			}
			return nil
		})
	}
	fakePodRunning(t, j)

	const starting = "starting AgentRun one-a; waiting for its pod to run"
	var runSeen, stepSeen []string
	var running *agentsv1alpha1.AgentRunStatus
	// The OrchestrationRun's first status with a step in it: the step's start claim's. (A write
	// before it is possible, should the run come before its Orchestration to the informers.)
	var firstWrite *orchv1alpha1.OrchestrationRunStatus
	stepRunning := false
	for running == nil || !stepRunning {
		select {
		case ev, ok := <-runs:
			st := watched[*agentsv1alpha1.AgentRun](t, ev, ok, runSeen).Status
			if s := st.Phase + "/" + st.Reason; len(runSeen) == 0 || runSeen[len(runSeen)-1] != s {
				runSeen = append(runSeen, s)
			}
			if st.Phase == agentsv1alpha1.PhaseRunning {
				running = &st
			}
		case ev, ok := <-orchRuns:
			or := watched[*orchv1alpha1.OrchestrationRun](t, ev, ok, stepSeen)
			if firstWrite == nil && len(or.Status.StepStatuses) > 0 {
				firstWrite = or.Status.DeepCopy()
			}
			for _, s := range or.Status.StepStatuses {
				if s.Name != "a" {
					continue
				}
				if v := s.Phase + ": " + s.Message; len(stepSeen) == 0 || stepSeen[len(stepSeen)-1] != v {
					stepSeen = append(stepSeen, v)
				}
				stepRunning = s.Phase == agentsv1alpha1.PhaseRunning
			}
		case <-ctx.Done():
			t.Fatalf("step a not Running on both objects within a minute; the AgentRun's statuses %v, the OrchestrationRun's step a %v", runSeen, stepSeen)
		}
	}
	if strings.Join(runSeen, " ") != strings.Join(runWant, " ") {
		t.Errorf("the step's AgentRun went through %v, want %v", runSeen, runWant)
	}
	if len(stepSeen) != 2 || stepSeen[0] != "Pending: "+starting || !strings.HasPrefix(stepSeen[1], "Running: ") {
		t.Errorf("the OrchestrationRun's step a went through %q, want Pending %q, then Running", stepSeen, starting)
	}
	if running.JobRef == nil || running.JobRef.Name != j.Name || running.JobRef.UID != string(j.UID) {
		t.Errorf("Running records jobRef %+v, want Job %s uid %s", running.JobRef, j.Name, j.UID)
	}
	// The claim wrote the whole status, phase and run ID with the step: no write of them follows.
	if firstWrite == nil || firstWrite.Phase != agentsv1alpha1.PhasePending || firstWrite.RunID == "" || len(firstWrite.StepStatuses) != 1 {
		t.Errorf("the OrchestrationRun's first status write %+v, want Pending with its run ID and step a starting", firstWrite)
	}
}

// A diamond: a, then b and c once a succeeded, then d once both did.
func TestOrchestrationRunStartsStepsWhenTheirDependenciesSucceed(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	c := startController(t, ns, nil)
	create(t, "orchestrations", ns, orchestration(ns, "diamond", step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")))
	or := orchRun(ns, "dia", "diamond")
	or.Annotations = map[string]string{"agentplane.dev/simulate-duration": "5s"}
	create(t, "orchestrationruns", ns, or)
	testenv.Eventually(t, 20*time.Second, "step a's AgentRun", func() error {
		if !childExists(t, ns, "dia-a") {
			return fmt.Errorf("no dia-a")
		}
		return nil
	})
	a := getRun(t, ns, "dia-a")
	if a.Labels[agentsv1alpha1.LabelOrchestrationRun] != "dia" || a.Labels[agentsv1alpha1.LabelOrchestrationStep] != "a" ||
		a.Annotations["agentplane.dev/simulate-duration"] != "5s" || a.Spec.Parameters["issue"] != "7" {
		t.Errorf("child a: labels %v annotations %v params %v", a.Labels, a.Annotations, a.Spec.Parameters)
	}
	if ref := core.ControllerOf(a.OwnerReferences, "OrchestrationRun"); ref == nil || ref.UID != types.UID(getOrchRun(t, ns, "dia").UID) {
		t.Errorf("owner %+v", a.OwnerReferences)
	}
	settle(t, c, "OrchestrationRun", ns, "dia")
	for _, n := range []string{"dia-b", "dia-c", "dia-d"} {
		if childExists(t, ns, n) {
			t.Fatalf("%s started before a succeeded", n)
		}
	}
	finishStep(t, ns, "dia", "a", true)
	testenv.Eventually(t, 20*time.Second, "b and c start", func() error {
		if !childExists(t, ns, "dia-b") || !childExists(t, ns, "dia-c") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// The run's status follows its children (written after they are created).
	testenv.Eventually(t, 20*time.Second, "the run Running", func() error {
		if got := getOrchRun(t, ns, "dia"); got.Status.Phase != agentsv1alpha1.PhaseRunning || got.Status.StartedAt == nil {
			return fmt.Errorf("orchestration run %+v", got.Status)
		}
		return nil
	})
	finishStep(t, ns, "dia", "b", true)
	cached(t, c, ns, "dia-b", agentsv1alpha1.PhaseSucceeded)
	settle(t, c, "OrchestrationRun", ns, "dia")
	if childExists(t, ns, "dia-d") {
		t.Fatal("d started before c succeeded")
	}
	finishStep(t, ns, "dia", "c", true)
	finishStep(t, ns, "dia", "d", true)
	got := waitOrchPhase(t, ns, "dia", agentsv1alpha1.PhaseSucceeded, 20*time.Second)
	if got.Status.FinishedAt == nil || got.Status.RunID != string(got.UID) || len(got.Status.StepStatuses) != 4 {
		t.Errorf("status %+v", got.Status)
	}
	for _, s := range got.Status.StepStatuses {
		if s.Phase != agentsv1alpha1.PhaseSucceeded || s.ResourceRef == nil || s.ResourceRef.Name != "dia-"+s.Name {
			t.Errorf("step %+v", s)
		}
	}
}

func TestAFailedStepFailsTheOrchestrationRunAndStartsNothingMore(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	c := startController(t, ns, nil)
	create(t, "orchestrations", ns, orchestration(ns, "diamond", step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")))
	create(t, "orchestrationruns", ns, orchRun(ns, "dia", "diamond"))
	finishStep(t, ns, "dia", "a", true)
	finishStep(t, ns, "dia", "b", false)
	var got *orchv1alpha1.OrchestrationRun
	testenv.Eventually(t, 20*time.Second, "orchestration run Failed", func() error {
		got = getOrchRun(t, ns, "dia")
		if got.Status.Phase != agentsv1alpha1.PhaseFailed {
			return fmt.Errorf("%+v", got.Status)
		}
		return nil
	})
	if got.Status.Reason != reasons.StepFailed || !strings.Contains(got.Status.Message, "step b") || got.Status.FinishedAt == nil {
		t.Errorf("status %+v", got.Status)
	}
	finishStep(t, ns, "dia", "c", true)
	cached(t, c, ns, "dia-c", agentsv1alpha1.PhaseSucceeded)
	settle(t, c, "OrchestrationRun", ns, "dia")
	if childExists(t, ns, "dia-d") {
		t.Fatal("d started after b failed")
	}
}

func TestOrchestrationProblemsAreReported(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	c := startController(t, ns, nil)
	create(t, "orchestrations", ns, orchestration(ns, "loop", step("x", "y"), step("y", "x")))
	create(t, "orchestrationruns", ns, orchRun(ns, "cyc", "loop"))
	create(t, "orchestrationruns", ns, orchRun(ns, "waits", "not-yet"))
	cancelled := orchRun(ns, "cancelled", "one")
	cancelled.Spec.Cancel = true
	create(t, "orchestrationruns", ns, cancelled)
	testenv.Eventually(t, 20*time.Second, "cycle refused, missing Orchestration waits", func() error {
		if c := getOrchRun(t, ns, "cyc"); c.Status.Phase != agentsv1alpha1.PhaseFailed || !strings.Contains(c.Status.Message, "cycle") {
			return fmt.Errorf("cyc %+v", c.Status)
		}
		if w := getOrchRun(t, ns, "waits"); w.Status.Phase != agentsv1alpha1.PhasePending || w.Status.Reason != "InvalidSpec" {
			return fmt.Errorf("waits %+v", w.Status)
		}
		return nil
	})
	waitEvent(t, ns, "cyc", "Warning", "InvalidSpec")
	create(t, "orchestrations", ns, orchestration(ns, "not-yet", step("only")))
	create(t, "orchestrations", ns, orchestration(ns, "one", step("only")))
	testenv.Eventually(t, 20*time.Second, "runs once the Orchestration exists", func() error {
		if !childExists(t, ns, "waits-only") {
			return fmt.Errorf("no child")
		}
		return nil
	})
	// Once the controller's cache has the Orchestration, a fresh reconcile must still start
	// nothing for the cancelled run.
	settle(t, c, "OrchestrationRun", ns, "cancelled") // orders this goroutine after Run filled c.orchs
	testenv.Eventually(t, 30*time.Second, "the controller's cache has Orchestration one", func() error {
		if _, ok, err := c.Orchs[ns].GetIndexer().GetByKey(ns + "/one"); err != nil || !ok {
			return fmt.Errorf("not cached: %v", err)
		}
		return nil
	})
	settle(t, c, "OrchestrationRun", ns, "cancelled")
	if childExists(t, ns, "cancelled-only") {
		t.Error("a cancelled run started a step")
	}
}

// For a few seconds after kube-apiserver starts, it refuses every new AgentRun with 422 Invalid
// ("... denied request: failed to configure binding: failed to find resource referenced by
// paramKind ...") until it has discovered the Agent kind the run policies take parameters from.
// A step created then is retried; its OrchestrationRun neither fails nor loses the step. Here a
// policy whose paramKind does not exist stands for that window, in this test's namespace only.
func TestAStepRefusedByAnAdmissionPolicyNotSetUpIsRetriedNotFailed(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	release := holdCreates(t, ns, "agents.proompteng.ai", "agentruns")
	c := startController(t, ns, nil)
	create(t, "orchestrations", ns, orchestration(ns, "one", step("only")))
	create(t, "orchestrationruns", ns, orchRun(ns, "held", "one"))
	settle(t, c, "OrchestrationRun", ns, "held")
	settle(t, c, "OrchestrationRun", ns, "held")
	if got := getOrchRun(t, ns, "held"); got.Status.Phase == agentsv1alpha1.PhaseFailed || childExists(t, ns, "held-only") {
		t.Fatalf("while the policy cannot run: status %+v, step created %v; want the run waiting, retrying", got.Status, childExists(t, ns, "held-only"))
	}

	release()
	testenv.Eventually(t, 60*time.Second, "the step starts once the policy is gone", func() error {
		if !childExists(t, ns, "held-only") {
			return fmt.Errorf("no held-only; run %+v", getOrchRun(t, ns, "held").Status)
		}
		return nil
	})
	finishStep(t, ns, "held", "only", true)
	testenv.Eventually(t, 20*time.Second, "the run Succeeded", func() error {
		if got := getOrchRun(t, ns, "held"); got.Status.Phase != agentsv1alpha1.PhaseSucceeded {
			return fmt.Errorf("%+v", got.Status)
		}
		return nil
	})
}

// The same for a Job: a policy on Jobs that kube-apiserver cannot set up yet holds the run
// Pending, retried; it does not fail it as an invalid spec.
func TestAJobRefusedByAnAdmissionPolicyNotSetUpIsRetriedNotFailed(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	release := holdCreates(t, ns, "batch", "jobs")
	c := startController(t, ns, nil)
	create(t, "agentruns", ns, jobRun(ns, "held", "codex"))
	settle(t, c, "AgentRun", ns, "held")
	settle(t, c, "AgentRun", ns, "held")
	if got := getRun(t, ns, "held"); got.Status.Phase == agentsv1alpha1.PhaseFailed || len(jobsIn(t, ns)) != 0 {
		t.Fatalf("while the policy cannot run: status %+v, %d Jobs; want the run waiting, retrying", got.Status, len(jobsIn(t, ns)))
	}
	// Seed 001: the transient error is in the run's conditions while it lasts (#32 item 5).
	testenv.Eventually(t, 20*time.Second, "Reconciled=False with the error", func() error {
		c := condition(getRun(t, ns, "held").Status.Conditions, reasons.CondReconciled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reasons.ReconcileError || !strings.Contains(c.Message, "admission policy could not run yet") {
			return fmt.Errorf("Reconciled %+v", c)
		}
		return nil
	})
	release()
	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "held"), "", 1))
	// Kept until the next successful reconcile, which clears it.
	testenv.Eventually(t, 20*time.Second, "Reconciled=True once a reconcile succeeded", func() error {
		c := condition(getRun(t, ns, "held").Status.Conditions, reasons.CondReconciled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reasons.Reconciled {
			return fmt.Errorf("Reconciled %+v", c)
		}
		return nil
	})
	finishJob(t, ns, j.Name, true)
	waitPhase(t, ns, "held", agentsv1alpha1.PhaseSucceeded, 30*time.Second)
}

// holdCreates makes kube-apiserver refuse every create of group/resource in ns the way it does
// for a few seconds after it starts, while it cannot set up a policy: a ValidatingAdmissionPolicy
// whose paramKind does not exist ("failed to configure policy: failed to find resource
// referenced by paramKind"), bound to ns alone. It returns once the refusal is in force; release
// deletes the policy.
func holdCreates(t *testing.T, ns, group, resource string) (release func()) {
	t.Helper()
	name := "not-set-up-" + ns + "-" + resource
	manifest := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: agents.proompteng.ai/v1alpha1, kind: NotDiscoveredYet}
  matchConstraints:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[2]s}}
    resourceRules:
    - {apiGroups: [%[3]q], apiVersions: ["*"], operations: [CREATE], resources: [%[4]s]}
  validations:
  - expression: "true"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
  paramRef: {selector: {}, parameterNotFoundAction: Allow}
`, name, ns, group, resource)
	path := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := env.RunKubectl(t.Context(), "apply", "-f", path); err != nil {
		t.Fatalf("apply the policy: %v %s", err, stderr)
	}
	t.Cleanup(func() { _, _, _ = env.RunKubectl(context.Background(), "delete", "--ignore-not-found", "-f", path) })
	// In force once kube-apiserver has loaded it: a dry run is refused the way it is at start.
	testenv.Eventually(t, 30*time.Second, "the policy refuses "+resource+" in "+ns, func() error {
		var err error
		if resource == "jobs" {
			job := &batchv1.Job{TypeMeta: metav1TypeMeta("Job"), ObjectMeta: objectMeta(ns, "probe")}
			job.APIVersion = "batch/v1"
			job.Spec.Template.Spec.RestartPolicy = "Never"
			job.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "x"}}
			_, err = kc.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		} else {
			rc, _ := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
			err = rc.Post().Namespace(ns).Resource(resource).Param("dryRun", "All").Body(jobRun(ns, "probe", "codex")).Do(t.Context()).Error()
		}
		if !core.PolicyNotReady(err) {
			return fmt.Errorf("dry run: %v", err)
		}
		return nil
	})
	return func() {
		t.Helper()
		if _, stderr, err := env.RunKubectl(t.Context(), "delete", "-f", path); err != nil {
			t.Fatalf("delete the policy: %v %s", err, stderr)
		}
	}
}

// A retry (spec.retryOf) of a failed run takes the steps that succeeded there and runs the rest:
// the failed step, and what waited on it.
func TestARetriedOrchestrationRunRunsOnlyTheStepsThatDidNotSucceed(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	c := startController(t, ns, nil)
	create(t, "orchestrations", ns, orchestration(ns, "diamond", step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")))
	create(t, "orchestrationruns", ns, orchRun(ns, "dia", "diamond"))
	finishStep(t, ns, "dia", "a", true)
	finishStep(t, ns, "dia", "c", true)
	finishStep(t, ns, "dia", "b", false)
	waitOrchPhase(t, ns, "dia", agentsv1alpha1.PhaseFailed, 20*time.Second)
	retry := orchRun(ns, "dia-retry", "diamond")
	retry.Spec.RetryOf = "dia"
	create(t, "orchestrationruns", ns, retry)
	finishStep(t, ns, "dia-retry", "b", true)
	finishStep(t, ns, "dia-retry", "d", true)
	got := waitOrchPhase(t, ns, "dia-retry", agentsv1alpha1.PhaseSucceeded, 20*time.Second)
	settle(t, c, "OrchestrationRun", ns, "dia-retry")
	for _, n := range []string{"dia-retry-a", "dia-retry-c"} {
		if childExists(t, ns, n) {
			t.Errorf("%s ran again: the retry should have taken the step from dia", n)
		}
	}
	want := map[string]string{"a": "dia-a", "b": "dia-retry-b", "c": "dia-c", "d": "dia-retry-d"}
	for _, s := range got.Status.StepStatuses {
		if s.Phase != agentsv1alpha1.PhaseSucceeded || s.ResourceRef == nil || s.ResourceRef.Name != want[s.Name] {
			t.Errorf("step %s: %s %+v, want Succeeded with AgentRun %s", s.Name, s.Phase, s.ResourceRef, want[s.Name])
		}
		if taken := want[s.Name] == "dia-"+s.Name; taken != strings.Contains(s.Message, "succeeded in OrchestrationRun dia") {
			t.Errorf("step %s says %q", s.Name, s.Message)
		}
	}

	// A retry of a run that has not finished is refused, saying why.
	create(t, "orchestrationruns", ns, orchRun(ns, "busy", "diamond"))
	early := orchRun(ns, "busy-retry", "diamond")
	early.Spec.RetryOf = "busy"
	create(t, "orchestrationruns", ns, early)
	testenv.Eventually(t, 20*time.Second, "the early retry Failed", func() error {
		got := getOrchRun(t, ns, "busy-retry")
		if got.Status.Phase != agentsv1alpha1.PhaseFailed || got.Status.Reason != reasons.InvalidSpec || !strings.Contains(got.Status.Message, "has not finished") {
			return fmt.Errorf("%+v", got.Status)
		}
		return nil
	})
	if childExists(t, ns, "busy-retry-a") {
		t.Error("a refused retry started a step")
	}
}
