package cancel

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
