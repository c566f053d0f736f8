package statusclient

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

func TestOutcomeIsOnePolicyForEveryController(t *testing.T) {
	unavailable := grpcstatus.Error(codes.Unavailable, "status-writer restarting")
	for _, tc := range []struct {
		name  string
		err   error
		nil_  bool
		stale bool
	}{
		{"written", nil, true, false},
		{"the object is gone: nothing is left to write", grpcstatus.Error(codes.NotFound, "gone"), true, false},
		{"refused as stale", grpcstatus.Error(codes.FailedPrecondition, "generation 3 is older than 4"), false, true},
		{"anything else is retried as it is", unavailable, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Outcome(tc.err)
			if (got == nil) != tc.nil_ || errors.Is(got, ErrStale) != tc.stale {
				t.Fatalf("Outcome(%v) = %v", tc.err, got)
			}
			if tc.stale && !errors.Is(got, tc.err) {
				t.Fatalf("the refusal is not kept: %v", got)
			}
			if !tc.nil_ && !tc.stale && !errors.Is(got, unavailable) {
				t.Fatalf("Outcome(%v) = %v, want the error itself", tc.err, got)
			}
		})
	}
}

func TestTypedFieldsCarryEveryFieldOfTheAPITypes(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	job := &agentsv1alpha1.JobRef{Name: "j", Namespace: "ns", UID: "u"}
	f, err := AgentRunFields(job, &agentsv1alpha1.WorkflowStatus{Phase: "Running", LastTransitionTime: &at, Steps: []agentsv1alpha1.WorkflowStepStatus{{
		Name: "s", Phase: "Retrying", Attempt: 2, StartedAt: &at, FinishedAt: &at, LastTransitionTime: &at, Message: "m", NextRetryAt: &at, JobRef: job,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	s := f.GetWorkflow().GetSteps()[0]
	if f.GetJobRef().GetUid() != "u" || f.GetRuntimeRef()["kind"] != "Job" || s.GetAttempt() != 2 || s.GetNextRetryAt() != "2026-11-29T10:00:00Z" ||
		s.GetJobRef().GetName() != "j" || s.GetMessage() != "m" || f.GetWorkflow().GetLastTransitionTime() == "" {
		t.Fatalf("AgentRun fields %v", f)
	}
	o, err := OrchestrationRunFields("r", []orchv1alpha1.StepStatus{{Name: "a", Kind: "AgentRun", Phase: "Running", Message: "m", StartedAt: &at,
		ResourceRef: &orchv1alpha1.ResourceRef{APIVersion: "v", Kind: "AgentRun", Name: "n", Namespace: "ns", UID: "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	if o.GetRunId() != "r" || o.GetStepStatuses()[0].GetResourceRef().GetApiVersion() != "v" || o.GetStepStatuses()[0].GetStartedAt() == "" {
		t.Fatalf("OrchestrationRun fields %v", o)
	}
}
