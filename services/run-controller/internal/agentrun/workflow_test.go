package agentrun

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// The workflow plan as a table: what a workflow run's steps say, and which attempt starts now,
// from the recorded step statuses and the run's Jobs.
func TestPlanWorkflow(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	job := func(name string, conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Status: batchv1.JobStatus{Conditions: conds}}
	}
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	failed := func(ago time.Duration) batchv1.JobCondition {
		return batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded",
			Message: "exit 1", LastTransitionTime: metav1.NewTime(now.Add(-ago))}
	}
	steps := func(specs ...agentsv1alpha1.WorkflowStep) []agentsv1alpha1.WorkflowStep { return specs }
	step := func(name string, retries, backoff int32) agentsv1alpha1.WorkflowStep {
		return agentsv1alpha1.WorkflowStep{Name: name, Retries: retries, RetryBackoffSeconds: backoff}
	}
	type jobs = map[string]map[int32]*batchv1.Job
	type want struct {
		phases       string // each step's phase, comma-separated
		start        int32  // index of the step to start, -1 for none
		attempt      int32
		runPhase     string
		message      string // a part of the run's message, when it failed
		requeueAfter time.Duration
	}
	for _, tc := range []struct {
		name     string
		specs    []agentsv1alpha1.WorkflowStep
		recorded []agentsv1alpha1.WorkflowStepStatus
		jobs     jobs
		running  bool
		want     want
	}{
		{name: "nothing yet: the first step's first attempt starts, the rest wait",
			specs: steps(step("a", 0, 0), step("b", 0, 0)),
			want:  want{phases: ",Pending", start: 0, attempt: 1}},
		{name: "first step's Job created, no pod yet: Pending, nothing starts",
			specs: steps(step("a", 0, 0), step("b", 0, 0)), jobs: jobs{"a": {1: job("a1")}},
			want: want{phases: "Pending,Pending", start: -1}},
		{name: "first step's pod runs: Running",
			specs: steps(step("a", 0, 0), step("b", 0, 0)), jobs: jobs{"a": {1: job("a1")}}, running: true,
			want: want{phases: "Running,Pending", start: -1}},
		{name: "first step succeeded: the second starts",
			specs: steps(step("a", 0, 0), step("b", 0, 0)), jobs: jobs{"a": {1: job("a1", complete)}},
			want: want{phases: "Succeeded,", start: 1, attempt: 1}},
		{name: "a step recorded Succeeded whose Job is gone stays Succeeded",
			specs:    steps(step("a", 0, 0), step("b", 0, 0)),
			recorded: []agentsv1alpha1.WorkflowStepStatus{{Name: "a", Phase: agentsv1alpha1.PhaseSucceeded, Attempt: 1}},
			want:     want{phases: "Succeeded,", start: 1, attempt: 1}},
		{name: "a step failed with no retries left fails the run; later steps never start",
			specs: steps(step("a", 0, 0), step("b", 0, 0)), jobs: jobs{"a": {1: job("a1", failed(time.Second))}},
			want: want{phases: "Failed,Pending", start: -1, runPhase: agentsv1alpha1.PhaseFailed, message: "step a failed after 1 attempt(s): Job a1: exit 1"}},
		{name: "a failed attempt with a retry left waits out its backoff",
			specs: steps(step("a", 1, 30)), jobs: jobs{"a": {1: job("a1", failed(10*time.Second))}},
			want: want{phases: ReasonRetrying, start: -1, requeueAfter: 20 * time.Second}},
		{name: "backoff over: the next attempt starts",
			specs: steps(step("a", 1, 30)), jobs: jobs{"a": {1: job("a1", failed(31*time.Second))}},
			want: want{phases: "", start: 0, attempt: 2}},
		{name: "the last attempt fails: the run fails, naming the attempts",
			specs: steps(step("a", 1, 0)), jobs: jobs{"a": {1: job("a1", failed(time.Minute)), 2: job("a2", failed(time.Second))}},
			want: want{phases: "Failed", start: -1, runPhase: agentsv1alpha1.PhaseFailed, message: "after 2 attempt(s)"}},
		{name: "a recorded failure with no retries left fails the run without its Jobs",
			specs:    steps(step("a", 1, 0), step("b", 0, 0)),
			recorded: []agentsv1alpha1.WorkflowStepStatus{{Name: "a", Phase: agentsv1alpha1.PhaseFailed, Attempt: 2, Message: "gone"}},
			want:     want{phases: "Failed,Pending", start: -1, runPhase: agentsv1alpha1.PhaseFailed, message: "step a failed after 2 attempt(s): gone"}},
		{name: "a step's Job gone before its outcome was recorded: nothing restarts it",
			specs:    steps(step("a", 0, 0), step("b", 0, 0)),
			recorded: []agentsv1alpha1.WorkflowStepStatus{{Name: "a", Phase: agentsv1alpha1.PhaseRunning, Attempt: 1, JobRef: &agentsv1alpha1.JobRef{Name: "a1"}}},
			want:     want{phases: "Running,Pending", start: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recorded := map[string]agentsv1alpha1.WorkflowStepStatus{}
			for _, r := range tc.recorded {
				recorded[r.Name] = r
			}
			plan := planWorkflow(tc.specs, recorded, tc.jobs, func(*batchv1.Job) bool { return tc.running }, now)
			var phases []string
			for _, s := range plan.steps {
				phases = append(phases, s.Phase)
			}
			if got := strings.Join(phases, ","); got != tc.want.phases {
				t.Errorf("step phases %q, want %q", got, tc.want.phases)
			}
			if plan.start != tc.want.start || (tc.want.start >= 0 && plan.startAttempt != tc.want.attempt) {
				t.Errorf("start step %d attempt %d, want step %d attempt %d", plan.start, plan.startAttempt, tc.want.start, tc.want.attempt)
			}
			if plan.phase != tc.want.runPhase || !strings.Contains(plan.message, tc.want.message) {
				t.Errorf("run phase %q message %q, want %q with %q", plan.phase, plan.message, tc.want.runPhase, tc.want.message)
			}
			if plan.requeueAfter != tc.want.requeueAfter {
				t.Errorf("requeue after %v, want %v", plan.requeueAfter, tc.want.requeueAfter)
			}
		})
	}
}

func TestStepWorkTakesWhatTheStepOverrides(t *testing.T) {
	base := work{image: "base:1", params: map[string]string{"a": "1", "b": "2"}, timeout: 60, retries: 3}
	w := stepWork(base, agentsv1alpha1.WorkflowStep{Name: "s", Parameters: map[string]string{"b": "x"}, TimeoutSeconds: 5,
		Workload: &agentsv1alpha1.WorkloadSpec{Image: "step:2"}}, 2)
	if w.step != "s" || w.attempt != 2 || w.retries != 0 || w.image != "step:2" || w.timeout != 5 {
		t.Errorf("step work %+v", w)
	}
	if w.params["a"] != "1" || w.params["b"] != "x" || base.params["b"] != "2" {
		t.Errorf("params %v (base now %v): the step's override, the run's others, the run's map untouched", w.params, base.params)
	}
	if same := stepWork(base, agentsv1alpha1.WorkflowStep{Name: "t"}, 1); same.image != "base:1" || same.timeout != 60 {
		t.Errorf("a step that overrides nothing: %+v", same)
	}
}

// The status a job-runtime run's Job maps to, as a table.
func TestJobRunStatus(t *testing.T) {
	job := func(conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "u"}, Status: batchv1.JobStatus{Conditions: conds}}
	}
	for _, tc := range []struct {
		name                string
		job                 *batchv1.Job
		running             bool
		phase, reason, succ string // succ: the Succeeded condition's status, "" for none
	}{
		{"created, no pod yet", job(), false, agentsv1alpha1.PhasePending, "JobCreated", ""},
		{"a pod runs", job(), true, agentsv1alpha1.PhaseRunning, ReasonRunning, ""},
		{"complete", job(batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}), true, agentsv1alpha1.PhaseSucceeded, ReasonCompleted, "True"},
		{"failed, with the Job's reason", job(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded"}), true,
			agentsv1alpha1.PhaseFailed, "DeadlineExceeded", "False"},
		{"a condition not True says nothing", job(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionFalse}), false, agentsv1alpha1.PhasePending, "JobCreated", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := jobRunStatus(tc.job, func(*batchv1.Job) bool { return tc.running })
			if st.phase != tc.phase || st.reason != tc.reason || st.jobRef == nil || st.jobRef.Name != "j" {
				t.Fatalf("status %+v, want %s/%s with the jobRef", st, tc.phase, tc.reason)
			}
			succ := ""
			for _, c := range st.conds {
				if c.Type == CondSucceeded {
					succ = string(c.Status)
				}
			}
			if succ != tc.succ {
				t.Errorf("Succeeded condition %q, want %q", succ, tc.succ)
			}
		})
	}
}
