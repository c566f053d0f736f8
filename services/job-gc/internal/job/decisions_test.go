package job

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// The hold/release decision as a table: a Job's result hold is released once its run's status
// records the Job's outcome, and not before.
func TestAHoldIsReleasedOnlyOnceTheRunRecordsTheJobsOutcome(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	step := func(phase, uid string) agentsv1alpha1.WorkflowStepStatus {
		return agentsv1alpha1.WorkflowStepStatus{Name: "s", Phase: phase, JobRef: &agentsv1alpha1.JobRef{Name: "j", UID: uid}}
	}
	for _, tc := range []struct {
		name   string
		status agentsv1alpha1.AgentRunStatus
		want   bool
	}{
		{"running", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseRunning}, false},
		{"terminal phase, no finishedAt yet", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseSucceeded}, false},
		{"succeeded and finished", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseSucceeded, FinishedAt: &now}, true},
		{"failed and finished", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseFailed, FinishedAt: &now}, true},
		{"cancelled and finished", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseCancelled, FinishedAt: &now}, true},
		{"its workflow step succeeded with this Job", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseRunning,
			Workflow: &agentsv1alpha1.WorkflowStatus{Steps: []agentsv1alpha1.WorkflowStepStatus{step(agentsv1alpha1.PhaseSucceeded, "job-uid")}}}, true},
		{"its workflow step failed with this Job", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseRunning,
			Workflow: &agentsv1alpha1.WorkflowStatus{Steps: []agentsv1alpha1.WorkflowStepStatus{step(agentsv1alpha1.PhaseFailed, "job-uid")}}}, true},
		{"the step succeeded with another attempt's Job", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseRunning,
			Workflow: &agentsv1alpha1.WorkflowStatus{Steps: []agentsv1alpha1.WorkflowStepStatus{step(agentsv1alpha1.PhaseSucceeded, "other")}}}, false},
		{"the step is retrying with this Job", agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseRunning,
			Workflow: &agentsv1alpha1.WorkflowStatus{Steps: []agentsv1alpha1.WorkflowStepStatus{step("Retrying", "job-uid")}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Recorded(&agentsv1alpha1.AgentRun{Status: tc.status}, "job-uid"); got != tc.want {
				t.Fatalf("Recorded = %v, want %v", got, tc.want)
			}
		})
	}
}

// A hold is overdue from when the Job finished or was marked for deletion, whichever came first.
func TestHoldSinceIsTheEarlierOfFinishedAndDeleted(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	done := func(at time.Time) batchv1.JobCondition {
		return batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}
	}
	for _, tc := range []struct {
		name string
		job  batchv1.Job
		want time.Time
	}{
		{"still running, not deleted", batchv1.Job{}, time.Time{}},
		{"finished", batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{done(t0)}, CompletionTime: ptrTime(t0)}}, t0},
		{"deleted while running", batchv1.Job{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptrTime(t0)}}, t0},
		{"deleted before it finished", batchv1.Job{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptrTime(t0)},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{done(t0.Add(time.Minute))}, CompletionTime: ptrTime(t0.Add(time.Minute))}}, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := holdSince(&tc.job); !got.Equal(tc.want) {
				t.Fatalf("holdSince = %v, want %v", got, tc.want)
			}
		})
	}
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }
