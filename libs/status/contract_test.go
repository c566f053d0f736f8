package status

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(90 * time.Second)
)

func tp(t time.Time) *metav1.Time { v := metav1.NewTime(t); return &v }

func mt(t time.Time) *metav1.MicroTime { v := metav1.NewMicroTime(t); return &v }

func cond(typ, st, reason string, gen int64, ltt time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(st), Reason: reason, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(ltt)}
}

func TestApply(t *testing.T) {
	cases := []struct {
		name    string
		cur     Fields
		gen     int64
		req     Request
		wantErr error
		errHas  string
		check   func(t *testing.T, got Fields)
	}{
		{
			name: "observedGeneration is the generation reconciled",
			cur:  Fields{Phase: PhasePending, ObservedGeneration: 1},
			gen:  3, req: Request{ObservedGeneration: 3, Phase: PhasePending},
			check: func(t *testing.T, got Fields) {
				if got.ObservedGeneration != 3 {
					t.Fatalf("observedGeneration = %d", got.ObservedGeneration)
				}
			},
		},
		{
			name: "observedGeneration from the future is refused",
			cur:  Fields{ObservedGeneration: 1}, gen: 2,
			req:     Request{ObservedGeneration: 3, Phase: PhasePending},
			wantErr: ErrPrecondition, errHas: "ahead of the object's generation 2",
		},
		{
			name: "observedGeneration never goes backwards",
			cur:  Fields{ObservedGeneration: 4}, gen: 4,
			req:     Request{ObservedGeneration: 3, Phase: PhaseRunning},
			wantErr: ErrPrecondition, errHas: "older than the 4 already recorded",
		},
		{
			name: "observedGeneration is required",
			gen:  1, req: Request{Phase: PhasePending},
			wantErr: ErrInvalid, errHas: "observedGeneration must be",
		},
		{
			name: "updatedAt moves on every write even when nothing changed",
			cur:  Fields{Phase: PhaseRunning, ObservedGeneration: 1, UpdatedAt: mt(t1), StartedAt: tp(t0)},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseRunning},
			check: func(t *testing.T, got Fields) {
				if !got.UpdatedAt.After(t1) {
					t.Fatalf("updatedAt %s did not move past %s", got.UpdatedAt, t1)
				}
			},
		},
		{
			name: "startedAt is set on the first transition into Running",
			cur:  Fields{Phase: PhasePending, ObservedGeneration: 1},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseRunning},
			check: func(t *testing.T, got Fields) {
				if got.StartedAt == nil || !got.StartedAt.Time.Equal(t1) || got.FinishedAt != nil {
					t.Fatalf("startedAt=%v finishedAt=%v", got.StartedAt, got.FinishedAt)
				}
			},
		},
		{
			name: "startedAt is immutable once set",
			cur:  Fields{Phase: PhaseRunning, ObservedGeneration: 1, StartedAt: tp(t0)},
			gen:  2, req: Request{ObservedGeneration: 2, Phase: PhaseRunning},
			check: func(t *testing.T, got Fields) {
				if !got.StartedAt.Time.Equal(t0) {
					t.Fatalf("startedAt moved to %s", got.StartedAt)
				}
			},
		},
		{
			name: "finishedAt is set on the first transition into a terminal phase and startedAt kept",
			cur:  Fields{Phase: PhaseRunning, ObservedGeneration: 1, StartedAt: tp(t0)},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseSucceeded, Reason: "Completed"},
			check: func(t *testing.T, got Fields) {
				if got.FinishedAt == nil || !got.FinishedAt.Time.Equal(t1) || !got.StartedAt.Time.Equal(t0) {
					t.Fatalf("startedAt=%v finishedAt=%v", got.StartedAt, got.FinishedAt)
				}
			},
		},
		{
			name: "finishedAt is immutable once set",
			cur:  Fields{Phase: PhaseFailed, ObservedGeneration: 1, FinishedAt: tp(t0)},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseFailed, Reason: "BackoffLimitExceeded"},
			check: func(t *testing.T, got Fields) {
				if !got.FinishedAt.Time.Equal(t0) || got.Reason != "BackoffLimitExceeded" {
					t.Fatalf("finishedAt=%v reason=%q", got.FinishedAt, got.Reason)
				}
			},
		},
		{
			name: "a run that fails before it ran has finishedAt and no startedAt",
			cur:  Fields{Phase: PhasePending, ObservedGeneration: 1},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseFailed, Reason: "MissingSecret"},
			check: func(t *testing.T, got Fields) {
				if got.StartedAt != nil || got.FinishedAt == nil {
					t.Fatalf("startedAt=%v finishedAt=%v", got.StartedAt, got.FinishedAt)
				}
			},
		},
		{
			name: "a run cancelled before it ran has finishedAt and no startedAt",
			cur:  Fields{Phase: PhasePending, ObservedGeneration: 1},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseCancelled},
			check: func(t *testing.T, got Fields) {
				if got.StartedAt != nil || got.FinishedAt == nil {
					t.Fatalf("startedAt=%v finishedAt=%v", got.StartedAt, got.FinishedAt)
				}
			},
		},
		{
			name: "a run that succeeds without being seen Running gets both",
			cur:  Fields{Phase: PhasePending, ObservedGeneration: 1},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseSucceeded},
			check: func(t *testing.T, got Fields) {
				if got.StartedAt == nil || got.FinishedAt == nil {
					t.Fatalf("startedAt=%v finishedAt=%v", got.StartedAt, got.FinishedAt)
				}
			},
		},
		{
			name: "a terminal phase is final",
			cur:  Fields{Phase: PhaseSucceeded, ObservedGeneration: 1, StartedAt: tp(t0), FinishedAt: tp(t0)},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseRunning},
			wantErr: ErrPrecondition, errHas: "terminal and cannot change to Running",
		},
		{
			name: "one terminal phase cannot become another",
			cur:  Fields{Phase: PhaseSucceeded, ObservedGeneration: 1, FinishedAt: tp(t0)},
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseCancelled},
			wantErr: ErrPrecondition,
		},
		{
			name: "an empty phase keeps the current one",
			cur:  Fields{Phase: PhaseRunning, ObservedGeneration: 1, StartedAt: tp(t0)},
			gen:  1, req: Request{ObservedGeneration: 1, Message: "still going"},
			check: func(t *testing.T, got Fields) {
				if got.Phase != PhaseRunning || got.Message != "still going" {
					t.Fatalf("phase=%q message=%q", got.Phase, got.Message)
				}
			},
		},
		{
			name: "an unknown phase is invalid",
			gen:  1, req: Request{ObservedGeneration: 1, Phase: "Exploded"},
			wantErr: ErrInvalid, errHas: `phase "Exploded"`,
		},
		{
			name: "a bad reason is invalid",
			gen:  1, req: Request{ObservedGeneration: 1, Phase: PhaseFailed, Reason: "not a reason!"},
			wantErr: ErrInvalid, errHas: "reason",
		},
		{
			name: "lastTransitionTime changes only when the condition's status changes",
			cur: Fields{Phase: PhaseRunning, ObservedGeneration: 1, Conditions: []metav1.Condition{
				cond("Ready", "False", "Starting", 1, t0), cond("Progressing", "True", "JobCreated", 1, t0),
			}},
			gen: 2, req: Request{ObservedGeneration: 2, Conditions: []metav1.Condition{
				cond("Ready", "True", "JobRunning", 0, time.Time{}), cond("Progressing", "True", "JobRunning", 0, time.Time{}),
			}},
			check: func(t *testing.T, got Fields) {
				ready, prog := got.Conditions[0], got.Conditions[1]
				if ready.Status != "True" || !ready.LastTransitionTime.Time.Equal(t1) {
					t.Errorf("Ready = %+v: its status changed, so its transition time must be now", ready)
				}
				if !prog.LastTransitionTime.Time.Equal(t0) || prog.Reason != "JobRunning" {
					t.Errorf("Progressing = %+v: status unchanged, so its transition time must stay", prog)
				}
				if ready.ObservedGeneration != 2 || prog.ObservedGeneration != 2 {
					t.Errorf("conditions' observedGeneration = %d, %d, want the request's 2", ready.ObservedGeneration, prog.ObservedGeneration)
				}
			},
		},
		{
			name: "each condition carries its own observedGeneration",
			cur:  Fields{ObservedGeneration: 1},
			gen:  3, req: Request{ObservedGeneration: 3, Conditions: []metav1.Condition{cond("Ready", "True", "Done", 2, time.Time{})}},
			check: func(t *testing.T, got Fields) {
				if got.Conditions[0].ObservedGeneration != 2 {
					t.Fatalf("condition observedGeneration = %d, want 2", got.Conditions[0].ObservedGeneration)
				}
			},
		},
		{
			name: "conditions not named keep their value",
			cur:  Fields{ObservedGeneration: 1, Conditions: []metav1.Condition{cond("Ready", "True", "Done", 1, t0)}},
			gen:  1, req: Request{ObservedGeneration: 1, Conditions: []metav1.Condition{cond("Cancelled", "False", "NotRequested", 0, time.Time{})}},
			check: func(t *testing.T, got Fields) {
				if len(got.Conditions) != 2 || got.Conditions[0].Type != "Ready" || !got.Conditions[0].LastTransitionTime.Time.Equal(t0) {
					t.Fatalf("conditions = %+v", got.Conditions)
				}
			},
		},
		{
			name: "condition reasons must match the API pattern",
			gen:  1, req: Request{ObservedGeneration: 1, Conditions: []metav1.Condition{cond("Ready", "True", "job-running", 0, time.Time{})}},
			wantErr: ErrInvalid, errHas: "conditions[0].reason",
		},
		{
			name: "condition status must be True, False or Unknown",
			gen:  1, req: Request{ObservedGeneration: 1, Conditions: []metav1.Condition{cond("Ready", "Yes", "Done", 0, time.Time{})}},
			wantErr: ErrInvalid, errHas: "conditions[0].status",
		},
		{
			name: "a condition cannot claim a generation beyond the request's",
			gen:  2, req: Request{ObservedGeneration: 1, Conditions: []metav1.Condition{cond("Ready", "True", "Done", 2, time.Time{})}},
			wantErr: ErrInvalid, errHas: "conditions[0].observedGeneration",
		},
		{
			name: "a condition type may appear once",
			gen:  1, req: Request{ObservedGeneration: 1, Conditions: []metav1.Condition{cond("Ready", "True", "A", 0, time.Time{}), cond("Ready", "False", "B", 0, time.Time{})}},
			wantErr: ErrInvalid, errHas: "appears twice",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.cur.Conditions
			var snapshot []metav1.Condition
			for _, c := range before {
				snapshot = append(snapshot, *c.DeepCopy())
			}
			got, err := Apply(tc.cur, tc.gen, tc.req, RunPhases, t1)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got.UpdatedAt == nil {
				t.Fatal("updatedAt not set")
			}
			for i := range snapshot {
				if snapshot[i] != before[i] {
					t.Fatalf("Apply modified the current conditions: %+v", before[i])
				}
			}
			tc.check(t, got)
		})
	}
}

// A conditions-only write (no phase, reason or message) keeps the reason and message, so a
// writer whose copy is stale cannot put back an older reason; any other write replaces them.
func TestAConditionsOnlyWriteKeepsReasonAndMessage(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	fin := metav1.NewTime(now.Add(-time.Minute))
	cur := Fields{Phase: PhaseSucceeded, Reason: "Completed", Message: "Job done", ObservedGeneration: 1, FinishedAt: &fin}
	out, err := Apply(cur, 1, Request{ObservedGeneration: 1, Conditions: []metav1.Condition{{Type: "JobMissing", Status: metav1.ConditionTrue, Reason: "WorkflowJobMissing"}}}, RunPhases, now)
	if err != nil {
		t.Fatal(err)
	}
	if out.Phase != PhaseSucceeded || out.Reason != "Completed" || out.Message != "Job done" || len(out.Conditions) != 1 {
		t.Errorf("conditions-only write: %+v", out)
	}
	out, err = Apply(cur, 1, Request{ObservedGeneration: 1, Reason: "Running"}, RunPhases, now)
	if err != nil || out.Reason != "Running" || out.Message != "" {
		t.Errorf("a write with a reason replaces reason and message: %+v %v", out, err)
	}
}
