package cancel

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/reasons"
)

// The cancel plan as a table: a cancelled run's first step from its phase, its Cancelled
// condition, what this process already did and whether cancel support is on.
func TestPlanCancel(t *testing.T) {
	with := func(reason string) *metav1.Condition { return &metav1.Condition{Type: CondCancelled, Reason: reason} }
	for _, tc := range []struct {
		name     string
		phase    string
		cond     *metav1.Condition
		doneHere bool
		enabled  bool
		want     cancelStep
	}{
		{"a running run: record the request", "Running", nil, false, true, cancelRequest},
		{"a pending run: the same", "Pending", nil, false, true, cancelRequest},
		{"the request recorded (a restart): go on from it", "Running", with(reasons.CancelRequested), false, true, cancelResume},
		{"already Cancelled", "Cancelled", with(reasons.Cancelled), false, true, cancelNothing},
		{"written Cancelled by this process, the cache behind", "Running", with(reasons.CancelRequested), true, true, cancelNothing},
		{"finished before the cancel: record the no-op", "Succeeded", nil, false, true, cancelIgnoreTerminal},
		{"failed before the cancel: the same", "Failed", nil, false, true, cancelIgnoreTerminal},
		{"the no-op recorded: nothing more", "Succeeded", with(reasons.CancelIgnoredTerminal), false, true, cancelNothing},
		{"cancel support off: record it", "Running", nil, false, false, cancelDisabled},
		{"cancel support off, recorded: nothing more", "Running", with(reasons.CancelDisabled), false, false, cancelNothing},
		{"a finished run while support is off: the finish wins", "Failed", nil, false, false, cancelIgnoreTerminal},
		{"refused while support was off, support back on: it stays refused", "Running", with(reasons.CancelDisabled), false, true, cancelNothing},
		{"refused, then the run finished: the refusal stays", "Succeeded", with(reasons.CancelDisabled), false, true, cancelNothing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planCancel(tc.phase, tc.cond, tc.doneHere, tc.enabled); got != tc.want {
				t.Fatalf("planCancel = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFinishReason(t *testing.T) {
	for _, tc := range []struct {
		name             string
		left             int
		elapsed, timeout time.Duration
		end              bool
		reason           string
	}{
		{"nothing left: Cancelled", 0, time.Second, time.Minute, true, reasons.Cancelled},
		{"nothing left after the timeout: still Cancelled", 0, 2 * time.Minute, time.Minute, true, reasons.Cancelled},
		{"children left, time left: wait", 3, time.Second, time.Minute, false, ""},
		{"children left at the timeout: CancelTimedOut", 3, time.Minute, time.Minute, true, reasons.CancelTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end, reason := finishReason(tc.left, tc.elapsed, tc.timeout)
			if end != tc.end || reason != tc.reason {
				t.Fatalf("finishReason = %v %q, want %v %q", end, reason, tc.end, tc.reason)
			}
		})
	}
}

// Whose a step's cancel is: its OrchestrationRun's while the OrchestrationRun's cancel goes on,
// its own otherwise (not cancelled, refused, finished, deleted, or written Cancelled here).
func TestTakesSteps(t *testing.T) {
	uid := types.UID("or-uid")
	or := func(cancel bool, phase, reason string, deleting bool) *orchv1alpha1.OrchestrationRun {
		o := &orchv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{UID: uid}, Spec: orchv1alpha1.OrchestrationRunSpec{Cancel: cancel}}
		o.Status.Phase = phase
		if reason != "" {
			o.Status.Conditions = []metav1.Condition{{Type: CondCancelled, Reason: reason}}
		}
		if deleting {
			o.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return o
	}
	for _, tc := range []struct {
		name    string
		or      *orchv1alpha1.OrchestrationRun
		enabled bool
		done    bool
		want    bool
	}{
		{"cancelled, not yet recorded", or(true, "Running", "", false), true, false, true},
		{"cancel requested", or(true, "Running", reasons.CancelRequested, false), true, false, true},
		{"not cancelled", or(false, "Running", "", false), true, false, false},
		{"Cancelled: late steps cancel on their own", or(true, "Cancelled", reasons.Cancelled, false), true, false, false},
		{"written Cancelled here, the cache behind", or(true, "Running", reasons.CancelRequested, false), true, true, false},
		{"refused while cancel support was off", or(true, "Running", reasons.CancelDisabled, false), true, false, false},
		{"cancel support off", or(true, "Running", "", false), false, false, false},
		{"finished before the cancel", or(true, "Failed", "", false), true, false, false},
		{"being deleted", or(true, "Running", reasons.CancelRequested, true), true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Options{Enabled: tc.enabled, Timeout: time.Minute})
			if tc.done {
				p.settle(uid)
			}
			if got := p.TakesSteps(tc.or); got != tc.want {
				t.Errorf("TakesSteps = %v, want %v", got, tc.want)
			}
		})
	}
}
