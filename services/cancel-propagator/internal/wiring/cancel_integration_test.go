//go:build integration

package wiring

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

const agentAndPlan = `
apiVersion: agents.proompteng.ai/v1alpha1
kind: Agent
metadata: {name: codex}
spec:
  providerRef: {name: codex-runner}
  defaults: {image: registry.example.com/agents/codex:1.0}
---
apiVersion: orchestration.proompteng.ai/v1alpha1
kind: Orchestration
metadata: {name: two-steps}
spec:
  steps:
    - {name: a, kind: AgentRun, agentRef: {name: codex}}
    - {name: b, kind: AgentRun, agentRef: {name: codex}, dependsOn: [a]}
`

func orchRun(name string) string {
	return fmt.Sprintf(`
apiVersion: orchestration.proompteng.ai/v1alpha1
kind: OrchestrationRun
metadata: {name: %s}
spec:
  orchestrationRef: {name: two-steps}
`, name)
}

const workflowCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: workflows.argoproj.io}
spec:
  group: argoproj.io
  names: {kind: Workflow, listKind: WorkflowList, plural: workflows, singular: workflow}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// The seed's commands, as written: the patch cancels a running OrchestrationRun; its step's
// AgentRun is cancelled and its Job deleted, its Argo Workflow shut down and
// deleted; the next step never starts; the run ends Cancelled with the Cancelled condition,
// finishedAt set, after CancelRequested was recorded.
func TestCancellingAnOrchestrationRunStopsEverythingUnderIt(t *testing.T) {
	f := newFixture(t)
	f.applyCluster(workflowCRD)
	f.apply(agentAndPlan + "---" + orchRun("or1"))
	f.runController()
	var jobName string
	testenv.Eventually(t, 30*time.Second, "step a's Job", func() error {
		l, err := env.Client.BatchV1().Jobs(f.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return fmt.Errorf("%v %v", l, err)
		}
		jobName = l.Items[0].Name
		return nil
	})
	// An Argo Workflow of the run; its finalizer stands for Argo's controller still stopping it.
	wfs := dynamic.NewForConfigOrDie(env.Config).Resource(cancel.WorkflowGVR).Namespace(f.ns)
	testenv.Eventually(t, 30*time.Second, "the Workflow CRD served", func() error {
		_, err := wfs.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
			"metadata": map[string]any{"name": "wf", "labels": map[string]any{agentsv1alpha1.LabelOrchestrationRun: "or1"}, "finalizers": []any{"test/stopping"}},
			"spec":     map[string]any{"entrypoint": "main"},
		}}, metav1.CreateOptions{})
		return err
	})
	f.start(Config{Enabled: true, Timeout: time.Minute})
	if out, err := f.kubectl("-n", f.ns, "patch", "orchestrationrun", "or1", "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
		t.Fatalf("the seed's patch: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, "the Workflow shut down and deleted", func() error {
		wf, err := wfs.Get(context.Background(), "wf", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s, _, _ := unstructured.NestedString(wf.Object, "spec", "shutdown"); s != "Terminate" || wf.GetDeletionTimestamp() == nil {
			return fmt.Errorf("shutdown=%q deleting=%v", s, wf.GetDeletionTimestamp() != nil)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "step a cancelled, its Job deleted", func() error {
		ar, err := f.getAR("or1-a")
		if err != nil {
			return err
		}
		j, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), jobName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ar.Spec.Cancel || ar.Status.Phase != "Cancelled" || j.DeletionTimestamp == nil {
			return fmt.Errorf("run cancel=%v phase=%s; job deleting=%v", ar.Spec.Cancel, ar.Status.Phase, j.DeletionTimestamp != nil)
		}
		return nil
	})
	// The Workflow still stops: the run waits for it.
	or, err := f.getOR("or1")
	if err != nil {
		t.Fatal(err)
	}
	if or.Status.Phase == "Cancelled" || condOf(or.Status.Conditions) != "Unknown/CancelRequested" {
		t.Fatalf("with a Workflow still stopping: phase %s, condition %s", or.Status.Phase, condOf(or.Status.Conditions))
	}
	f.releaseWorkflow("wf")
	testenv.Eventually(t, 30*time.Second, "the run Cancelled", func() error {
		out, err := f.kubectl("-n", f.ns, "get", "orchestrationrun", "or1", "-o", "yaml")
		if err != nil || !strings.Contains(out, "phase: Cancelled") || !strings.Contains(out, "type: Cancelled") {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	or, _ = f.getOR("or1")
	if condOf(or.Status.Conditions) != "True/Cancelled" || or.Status.FinishedAt == nil {
		t.Errorf("condition %s finishedAt %v", condOf(or.Status.Conditions), or.Status.FinishedAt)
	}
	if !strings.Contains(or.Status.Message, "1 AgentRun(s)") || !strings.Contains(or.Status.Message, "1 Workflow(s)") {
		t.Errorf("message does not say what was stopped: %q", or.Status.Message)
	}
	if ev := f.events("or1"); !contains(ev, "Normal/"+reasons.CancelRequested) || !contains(ev, "Normal/"+reasons.Cancelled) {
		t.Errorf("events %v", ev)
	}
	// Step a was stopped and written Cancelled by the OrchestrationRun's pass, with no cancel
	// events of its own.
	if step, err := f.getAR("or1-a"); err != nil || !strings.HasPrefix(step.Status.Message, "cancelled with its OrchestrationRun or1") {
		t.Errorf("step a: %v %q", err, step.Status.Message)
	}
	if ev := f.events("or1-a"); contains(ev, reasons.CancelRequested) || contains(ev, reasons.Cancelled) {
		t.Errorf("step a's events %v, want none about the cancel", ev)
	}
	if _, err := f.getAR("or1-b"); !gone(err) {
		t.Errorf("step b started after the cancel: %v", err)
	}
	if got := f.metric("agentplane_cancel_propagator_cancels_total", "kind", "OrchestrationRun", "outcome", "Cancelled"); got != 1 {
		t.Errorf("cancels = %v", got)
	}
	if got := f.metric("agentplane_cancel_propagator_cancel_seconds", "kind", "OrchestrationRun"); got != 1 {
		t.Errorf("cancel durations observed = %v", got)
	}
	// Cancelling twice is the same as once.
	f.cancel("orchestrationruns", "or1")
	f.settle(kindOR, "or1")
	if got := f.metric("agentplane_cancel_propagator_cancels_total"); got != 2 { // or1 and its step a
		t.Errorf("cancels after a second request = %v, want 2", got)
	}
}

// A pod that does not stop within the timeout: the run is Cancelled anyway, with
// CancelTimedOut naming it, never left Unknown.
func TestACancelThatTimesOutNamesWhatStillRuns(t *testing.T) {
	f := newFixture(t)
	f.runningAgentRun("slow", "test/slow-to-stop")
	f.start(Config{Enabled: true, Timeout: 2 * time.Second})
	f.cancel("agentruns", "slow")
	testenv.Eventually(t, 20*time.Second, "Cancelled with CancelTimedOut", func() error {
		ar, err := f.getAR("slow")
		if err != nil {
			return err
		}
		if ar.Status.Phase != "Cancelled" || condOf(ar.Status.Conditions) != "True/CancelTimedOut" || !strings.Contains(ar.Status.Message, "Job slow-job (1 pod(s))") {
			return fmt.Errorf("%s %s %q", ar.Status.Phase, condOf(ar.Status.Conditions), ar.Status.Message)
		}
		return nil
	})
	pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), "slow-pod", metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp == nil {
		t.Errorf("the pod was not deleted: %v", err)
	}
	f.releasePod("slow-pod")
}

// Cancelling a Succeeded or Failed run changes neither its phase nor finishedAt; its
// observedGeneration follows the accepted spec change all the same (#32 item 6).
func TestCancellingAFinishedRunChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"done"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	finished := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	f.setARStatus("done", agentsv1alpha1.AgentRunStatus{Phase: "Succeeded", Reason: "Completed", FinishedAt: &finished})
	f.start(Config{Enabled: true, Timeout: time.Minute})
	f.cancel("agentruns", "done")
	testenv.Eventually(t, 20*time.Second, "CancelIgnoredTerminal recorded", func() error {
		ar, err := f.getAR("done")
		if err != nil {
			return err
		}
		if condOf(ar.Status.Conditions) != "False/CancelIgnoredTerminal" {
			return fmt.Errorf("condition %s", condOf(ar.Status.Conditions))
		}
		if ar.Status.Phase != "Succeeded" || ar.Status.Reason != "Completed" || !ar.Status.FinishedAt.Equal(&finished) {
			return fmt.Errorf("changed: %s %s %v", ar.Status.Phase, ar.Status.Reason, ar.Status.FinishedAt)
		}
		if ar.Generation < 2 || ar.Status.ObservedGeneration != ar.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d (the cancel is a spec change)", ar.Status.ObservedGeneration, ar.Generation)
		}
		return nil
	})
}

// With cancel support off, a cancel is left alone and a condition says so.
func TestCancelSupportOffLeavesTheRunAlone(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"r"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	ar, _ := f.getAR("r")
	f.job("r-job", ar)
	f.setARStatus("r", agentsv1alpha1.AgentRunStatus{Phase: "Running"})
	f.start(Config{Enabled: false, Timeout: time.Minute})
	f.cancel("agentruns", "r")
	testenv.Eventually(t, 20*time.Second, "CancelDisabled recorded", func() error {
		ar, err := f.getAR("r")
		if err != nil {
			return err
		}
		if condOf(ar.Status.Conditions) != "False/CancelDisabled" || ar.Status.Phase != "Running" {
			return fmt.Errorf("%s %s", ar.Status.Phase, condOf(ar.Status.Conditions))
		}
		return nil
	})
	j, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), "r-job", metav1.GetOptions{})
	if err != nil || j.DeletionTimestamp != nil || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
		t.Errorf("the Job was touched with cancel support off: %v", err)
	}
}

// The API server refuses to set spec.cancel back to false, on both kinds.
func TestACancelCannotBeUndone(t *testing.T) {
	f := newFixture(t)
	f.apply(agentAndPlan + "---" + orchRun("or") + `---
{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"r"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	for _, res := range []string{"orchestrationrun/or", "agentrun/r"} {
		if out, err := f.kubectl("-n", f.ns, "patch", res, "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		out, err := f.kubectl("-n", f.ns, "patch", res, "--type=merge", "-p", `{"spec":{"cancel":false}}`)
		if err == nil || !strings.Contains(out, "cannot be undone") {
			t.Errorf("%s: setting cancel back to false: %v %s", res, err, out)
		}
		out, err = f.kubectl("-n", f.ns, "patch", res, "--type=json", "-p", `[{"op":"remove","path":"/spec/cancel"}]`)
		if err == nil || !strings.Contains(out, "cannot be undone") {
			t.Errorf("%s: removing cancel: %v %s", res, err, out)
		}
	}
}

// Killing cancel-propagator mid-cancel and starting it again finishes the cancel.
func TestACancelSurvivesARestart(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"r"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	ar, _ := f.getAR("r")
	j := f.job("r-job", ar)
	f.pod("r-pod", j, "test/slow-to-stop")
	f.setARStatus("r", agentsv1alpha1.AgentRunStatus{Phase: "Running"})
	f.start(Config{Enabled: true, Timeout: time.Hour})
	f.cancel("agentruns", "r")
	testenv.Eventually(t, 20*time.Second, "CancelRequested", func() error {
		ar, err := f.getAR("r")
		if err != nil || condOf(ar.Status.Conditions) != "Unknown/CancelRequested" {
			return fmt.Errorf("%v %v", err, ar.Status.Conditions)
		}
		return nil
	})
	f.stopProp() // mid-cancel: the pod is still stopping
	f.releasePod("r-pod")
	f.start(Config{Enabled: true, Timeout: time.Hour})
	testenv.Eventually(t, 20*time.Second, "Cancelled by the new process", func() error {
		ar, err := f.getAR("r")
		if err != nil || ar.Status.Phase != "Cancelled" || condOf(ar.Status.Conditions) != "True/Cancelled" {
			return fmt.Errorf("%v %s %s", err, ar.Status.Phase, condOf(ar.Status.Conditions))
		}
		return nil
	})
	if got := f.metric("agentplane_cancel_propagator_cancels_total", "outcome", "Cancelled"); got != 1 {
		t.Errorf("the restarted process counted %v cancels", got)
	}
}

// No step starts once the cancel is requested: runs are cancelled right as their first step's
// Job finishes, many times. A step starts when run-controller's start claim is written on the
// OrchestrationRun (status-writer refuses it once spec.cancel is set); every step that has an
// AgentRun was claimed before the cancel, and no claim is written after it.
func TestNothingStartsAfterTheCancel(t *testing.T) {
	const rounds = 12
	f := newFixture(t)
	f.apply(agentAndPlan)
	f.runController()
	f.start(Config{Enabled: true, Timeout: time.Minute})
	ctx := context.Background()
	// The resourceVersion of the first OrchestrationRun write that shows step b claimed.
	var mu sync.Mutex
	claimed := map[string]int64{}
	w, err := dynamic.NewForConfigOrDie(env.Config).Resource(orchv1alpha1.GroupVersion.WithResource("orchestrationruns")).Namespace(f.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for e := range w.ResultChan() {
			u, ok := e.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			steps, _, _ := unstructured.NestedSlice(u.Object, "status", "stepStatuses")
			for _, s := range steps {
				m, _ := s.(map[string]any)
				msg, _ := m["message"].(string)
				if m["name"] == "b" && (strings.HasPrefix(msg, "starting") || m["resourceRef"] != nil) {
					mu.Lock()
					if _, seen := claimed[u.GetName()]; !seen {
						claimed[u.GetName()] = rv(u.GetResourceVersion())
					}
					mu.Unlock()
				}
			}
		}
	}()
	cancelRV := map[string]int64{}
	for i := range rounds {
		name := fmt.Sprintf("or-%d", i)
		f.apply(orchRun(name))
		var job string
		testenv.Eventually(t, 30*time.Second, name+"'s first Job", func() error {
			l, err := env.Client.BatchV1().Jobs(f.ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelOrchestrationRun + "=" + name})
			if err != nil || len(l.Items) != 1 {
				return fmt.Errorf("%d jobs %v", len(l.Items), err)
			}
			job = l.Items[0].Name
			return nil
		})
		// The step's Job succeeds and the cancel follows at once: run-controller is about to
		// start step b when the cancel lands (or just after).
		f.finishJob(job)
		time.Sleep(time.Duration(i%4) * 5 * time.Millisecond) // varies where the cancel lands: the scenario, not synchronisation
		cancelRV[name] = f.cancel("orchestrationruns", name)
	}
	startedB := 0
	for i := range rounds {
		name := fmt.Sprintf("or-%d", i)
		testenv.Eventually(t, 60*time.Second, name+" Cancelled", func() error {
			or, err := f.getOR(name)
			if err != nil || or.Status.Phase != "Cancelled" {
				return fmt.Errorf("%v %s", err, or.Status.Phase)
			}
			return nil
		})
		mu.Lock()
		at, wasClaimed := claimed[name]
		mu.Unlock()
		_, err := f.getAR(name + "-b")
		switch {
		case wasClaimed && at > cancelRV[name]:
			t.Errorf("%s: step b claimed at resourceVersion %d, after the cancel at %d", name, at, cancelRV[name])
		case err == nil && !wasClaimed:
			t.Errorf("%s: step b has an AgentRun but was never claimed", name)
		case err == nil:
			startedB++
		}
		l, err := env.Client.BatchV1().Jobs(f.ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelOrchestrationRun + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range l.Items {
			if j.DeletionTimestamp == nil && j.Status.CompletionTime == nil {
				t.Errorf("%s: Job %s still runs after the run was Cancelled", name, j.Name)
			}
		}
	}
	t.Logf("%d rounds: step b started (claimed) before the cancel in %d, refused in %d", rounds, startedB, rounds-startedB)
}

// Two replicas with leader election: one cancels, once.
func TestTwoReplicasCancelOnce(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"r"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	ar, _ := f.getAR("r")
	f.job("r-job", ar)
	f.setARStatus("r", agentsv1alpha1.AgentRunStatus{Phase: "Running"})
	var replicas []*testenv.Service
	for i := range 2 {
		s, err := testenv.StartService(binDir+"/cancel-propagator", binDir, "KUBECONFIG="+env.Kubeconfig, "POD_NAMESPACE="+f.ns,
			fmt.Sprintf("POD_NAME=cancel-propagator-%d", i), "JANGAR_AGENTS_CONTROLLER_NAMESPACES="+f.ns, "JANGAR_LEADER_ELECTION_ENABLED=true",
			"JANGAR_STATUS_WRITER_ADDR="+swAddr, "JANGAR_EVENT_EMITTER_ADDR="+evAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		replicas = append(replicas, s)
	}
	f.cancel("agentruns", "r")
	testenv.Eventually(t, 60*time.Second, "Cancelled", func() error {
		ar, err := f.getAR("r")
		if err != nil || ar.Status.Phase != "Cancelled" {
			return fmt.Errorf("%v %s", err, ar.Status.Phase)
		}
		return nil
	})
	// The count is taken after the status write the test waited for: scrape until it shows.
	count := func() float64 {
		total := 0.0
		for _, s := range replicas {
			resp, err := http.Get("http://" + s.MetricsAddr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(l, `agentplane_cancel_propagator_cancels_total{kind="AgentRun",outcome="Cancelled"}`) {
					v, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
					total += v
				}
			}
		}
		return total
	}
	testenv.Eventually(t, 10*time.Second, "the cancel counted", func() error {
		if count() == 0 {
			return fmt.Errorf("no replica counted it yet")
		}
		return nil
	})
	total := count()
	if total != 1 {
		t.Errorf("two replicas counted %v cancels, want 1", total)
	}
	if ev := f.events("r"); strings.Count(strings.Join(ev, ","), "Normal/"+reasons.CancelRequested) != 1 {
		t.Errorf("events %v: want one CancelRequested", ev)
	}
}

// A second pass over a run can still see a Job it deleted in the cache: before the deletion is
// observed (the process remembers it) and after (it has forgotten it, and the Job is gone). The
// Job is neither deleted again nor counted twice in "stopped N Job(s)".
func TestAJobStoppedTwiceFromAStaleCacheCountsOnce(t *testing.T) {
	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"stale"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	ar, err := f.getAR("stale")
	if err != nil {
		t.Fatal(err)
	}
	j := f.job("stale-job", ar)
	f.start(Config{Enabled: true, Timeout: time.Minute})
	for deadline := time.Now().Add(30 * time.Second); !f.p.Synced(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the propagator's caches never synced")
		}
	}
	stop := func() { // the same copy each time, as a stale cache would hand it over
		t.Helper()
		if err := f.p.protocol.StopJob(context.Background(), ar.UID, f.p.protocol.JobsOf(ar.UID), cancel.Key(cancel.KindAgentRun, f.ns, "stale"), j.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	stop()
	// The deletion observed: the process forgets the Job, which the stale copy still shows.
	deadline := time.Now().Add(30 * time.Second)
	for {
		remembered := f.p.protocol.JobHit(j.UID)
		if !remembered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Job's deletion was never observed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if got := f.p.protocol.StoppedSummary(ar.UID); got != "1 Job(s)" {
		t.Fatalf("stopped %q, want 1 Job(s)", got)
	}
}
