package cli

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// The fixtures' clock: every run was created at t0 or later, and agentctl prints at t0 + 1h.
var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }

// stopClock makes agentctl's clock read t0 + 1h for the test.
func stopClock(t *testing.T) {
	t.Helper()
	was := now
	now = func() time.Time { return t0.Add(time.Hour) }
	t.Cleanup(func() { now = was })
}

func meta(name string, created time.Duration, lbls map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "agents", UID: types.UID("uid-" + name), ResourceVersion: "7",
		CreationTimestamp: *at(created), Labels: lbls}
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string, when time.Duration) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: *at(when)}
}

var arType = metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: kindAgentRun}

// agentRun is a finished lone AgentRun of agent codex.
func agentRun(name, phase, msg string, created time.Duration, ran time.Duration) *agentsv1alpha1.AgentRun {
	ar := &agentsv1alpha1.AgentRun{TypeMeta: arType, ObjectMeta: meta(name, created, map[string]string{agentsv1alpha1.LabelAgent: "codex"}),
		Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob},
			Parameters: map[string]string{"issue": "42"}},
		Status: agentsv1alpha1.AgentRunStatus{Phase: phase, Message: msg, StartedAt: at(created + 2*time.Second), FinishedAt: at(created + 2*time.Second + ran),
			JobRef: &agentsv1alpha1.JobRef{Name: name + "-job"},
			Conditions: []metav1.Condition{cond("Ready", map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[phase == agentsv1alpha1.PhaseSucceeded],
				phase, msg, created+2*time.Second+ran)}}}
	if phase == agentsv1alpha1.PhaseFailed {
		ar.Status.Reason = "BackoffLimitExceeded"
	}
	return ar
}

// runJob is a finished Job of a run, labelled as run-controller labels them.
func runJob(name string, lbls map[string]string, created time.Duration, ok bool) *batchv1.Job {
	j := &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: meta(name, created, lbls)}
	if ok {
		j.Status = batchv1.JobStatus{Succeeded: 1, CompletionTime: at(created + 10*time.Second),
			Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	} else {
		j.Status = batchv1.JobStatus{Failed: 2, Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: *at(created + 10*time.Second)}}}
	}
	return j
}

func step(name string, deps ...string) orchv1alpha1.OrchestrationStep {
	return orchv1alpha1.OrchestrationStep{Name: name, Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "codex"}, DependsOn: deps}
}

func stepStatus(name, phase, msg string, start, end time.Duration, ref string) orchv1alpha1.StepStatus {
	s := orchv1alpha1.StepStatus{Name: name, Kind: "AgentRun", Phase: phase, Message: msg}
	if start >= 0 {
		s.StartedAt = at(start)
	}
	if end >= 0 {
		s.FinishedAt = at(end)
	}
	if ref != "" {
		s.ResourceRef = &orchv1alpha1.ResourceRef{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: kindAgentRun, Name: ref, Namespace: "agents"}
	}
	return s
}

// stepAgentRun is the AgentRun of a step of or, as run-controller creates it.
func stepAgentRun(or *orchv1alpha1.OrchestrationRun, s orchv1alpha1.StepStatus) *agentsv1alpha1.AgentRun {
	ar := agentRun(or.Name+"-"+s.Name, s.Phase, s.Message, s.StartedAt.Sub(t0), s.FinishedAt.Sub(s.StartedAt.Time)-2*time.Second)
	ar.Labels = map[string]string{agentsv1alpha1.LabelAgent: "codex", agentsv1alpha1.LabelOrchestrationRun: agentsv1alpha1.LabelValue(or.Name),
		agentsv1alpha1.LabelOrchestrationStep: agentsv1alpha1.LabelValue(s.Name)}
	ctrl := true
	ar.OwnerReferences = []metav1.OwnerReference{{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: kindOrchestrationRun, Name: or.Name, UID: or.UID, Controller: &ctrl}}
	return ar
}

// world is what the golden and exit-code tests serve: a Succeeded and a Failed AgentRun, the
// diamond Orchestration, a run of it that Failed in implement, and its retry that Succeeded
// without running plan and test again; their step AgentRuns, Jobs, pods, logs and events.
func world(t *testing.T) *fakeAPI {
	t.Helper()
	hello := agentRun("hello", agentsv1alpha1.PhaseSucceeded, "the Job completed", 0, 13*time.Second)
	fails := agentRun("fails", agentsv1alpha1.PhaseFailed, "Job fails-job failed: BackoffLimitExceeded (2 pods failed)", time.Minute, 20*time.Second)
	fails.Annotations = map[string]string{agentsv1alpha1.AnnotationResubmitOf: "hello"}
	orch := &orchv1alpha1.Orchestration{TypeMeta: metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "Orchestration"},
		ObjectMeta: meta("plan-and-implement", 0, nil),
		Spec: orchv1alpha1.OrchestrationSpec{Entrypoint: "plan", Steps: []orchv1alpha1.OrchestrationStep{
			step("plan"), step("implement", "plan"), step("test", "plan"), step("review", "implement", "test")}}}
	orType := metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: kindOrchestrationRun}
	d1 := &orchv1alpha1.OrchestrationRun{TypeMeta: orType, ObjectMeta: meta("diamond-1", 2*time.Minute, nil),
		Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "plan-and-implement"}, Parameters: map[string]string{"issue": "42"}},
		Status: orchv1alpha1.OrchestrationRunStatus{Phase: agentsv1alpha1.PhaseFailed, Reason: "StepFailed", Message: "step implement Failed",
			StartedAt: at(2 * time.Minute), FinishedAt: at(2*time.Minute + 40*time.Second),
			Conditions: []metav1.Condition{cond("Ready", metav1.ConditionFalse, "StepFailed", "step implement Failed", 2*time.Minute+40*time.Second)},
			StepStatuses: []orchv1alpha1.StepStatus{
				stepStatus("plan", agentsv1alpha1.PhaseSucceeded, "", 2*time.Minute, 2*time.Minute+15*time.Second, "diamond-1-plan"),
				stepStatus("implement", agentsv1alpha1.PhaseFailed, "Job diamond-1-implement-job failed: BackoffLimitExceeded", 2*time.Minute+15*time.Second, 2*time.Minute+40*time.Second, "diamond-1-implement"),
				stepStatus("test", agentsv1alpha1.PhaseSucceeded, "", 2*time.Minute+15*time.Second, 2*time.Minute+30*time.Second, "diamond-1-test"),
				stepStatus("review", agentsv1alpha1.PhasePending, "not run: step implement Failed", -1, -1, ""),
			}}}
	d2 := &orchv1alpha1.OrchestrationRun{TypeMeta: orType, ObjectMeta: meta("diamond-2", 5*time.Minute, nil),
		Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "plan-and-implement"}, Parameters: map[string]string{"issue": "42"}, RetryOf: "diamond-1"},
		Status: orchv1alpha1.OrchestrationRunStatus{Phase: agentsv1alpha1.PhaseSucceeded, Message: "every step Succeeded",
			StartedAt: at(5 * time.Minute), FinishedAt: at(5*time.Minute + 31*time.Second),
			Conditions: []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Succeeded", "every step Succeeded", 5*time.Minute+31*time.Second)},
			StepStatuses: []orchv1alpha1.StepStatus{
				stepStatus("plan", agentsv1alpha1.PhaseSucceeded, "succeeded in OrchestrationRun diamond-1: not run again by this retry", 2*time.Minute, 2*time.Minute+15*time.Second, "diamond-1-plan"),
				stepStatus("implement", agentsv1alpha1.PhaseSucceeded, "", 5*time.Minute, 5*time.Minute+16*time.Second, "diamond-2-implement"),
				stepStatus("test", agentsv1alpha1.PhaseSucceeded, "succeeded in OrchestrationRun diamond-1: not run again by this retry", 2*time.Minute+15*time.Second, 2*time.Minute+30*time.Second, "diamond-1-test"),
				stepStatus("review", agentsv1alpha1.PhaseSucceeded, "", 5*time.Minute+16*time.Second, 5*time.Minute+31*time.Second, "diamond-2-review"),
			}}}
	objs := []runtime.Object{hello, fails, orch, d1, d2,
		&agentsv1alpha1.Agent{TypeMeta: metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "Agent"}, ObjectMeta: meta("codex", 0, nil)},
		runJob("hello-job", map[string]string{agentsv1alpha1.LabelAgentRun: "hello"}, 2*time.Second, true),
		runJob("fails-job", map[string]string{agentsv1alpha1.LabelAgentRun: "fails"}, time.Minute+2*time.Second, false),
		podOf("hello-job-4xq2z", map[string]string{agentsv1alpha1.LabelAgentRun: "hello"}, "agent"),
		&corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}, ObjectMeta: meta("hello.1", 0, nil),
			InvolvedObject: corev1.ObjectReference{Kind: kindAgentRun, Name: "hello", UID: "uid-hello"}, Type: "Normal", Reason: "JobCreated",
			Message: "created Job hello-job", Source: corev1.EventSource{Component: "run-controller"}, LastTimestamp: *at(time.Second)},
		&corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}, ObjectMeta: meta("hello.2", 0, nil),
			InvolvedObject: corev1.ObjectReference{Kind: kindAgentRun, Name: "hello", UID: "uid-hello"}, Type: "Normal", Reason: "Succeeded",
			Message: "the Job completed", Source: corev1.EventSource{Component: "status-writer"}, LastTimestamp: *at(15 * time.Second)},
	}
	for _, or := range []*orchv1alpha1.OrchestrationRun{d1, d2} {
		for _, s := range or.Status.StepStatuses {
			if s.ResourceRef == nil || s.ResourceRef.Name != or.Name+"-"+s.Name {
				continue // not run, or taken from the run it retries
			}
			ar := stepAgentRun(or, s)
			objs = append(objs, ar,
				runJob(ar.Name+"-job", ar.Labels, s.StartedAt.Sub(t0), s.Phase == agentsv1alpha1.PhaseSucceeded),
				podOf(ar.Name+"-job-abcde", map[string]string{agentsv1alpha1.LabelAgentRun: agentsv1alpha1.LabelValue(ar.Name),
					agentsv1alpha1.LabelOrchestrationRun: agentsv1alpha1.LabelValue(or.Name)}, "agent"))
		}
	}
	f := newFakeAPI(t, objs...)
	f.logs["hello-job-4xq2z"] = "starting: issue 42\ndone\n"
	f.logs["diamond-2-implement-job-abcde"] = "implementing issue 42\n"
	f.logs["diamond-2-review-job-abcde"] = "reviewing\nlooks good\n"
	f.logs["diamond-1-plan-job-abcde"] = "planning\n"
	return f
}
