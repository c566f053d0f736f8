// Package status is the status contract of seed 000, as pure code: every agentplane CRD's
// observedGeneration, updatedAt, startedAt, finishedAt, phase and conditions follow these rules,
// and status-writer applies them on every write.
//
//   - observedGeneration is the metadata.generation the caller reconciled. A request for a
//     generation the object does not have yet, or older than the one already recorded, is refused.
//   - updatedAt moves on every write, even when nothing else changed.
//   - startedAt is set on the first transition into Running, finishedAt on the first transition
//     into a terminal phase (Succeeded, Failed, Cancelled); both are immutable once set. A run
//     that fails or is cancelled before it ever ran has finishedAt and no startedAt; one that
//     succeeds without having been seen Running gets both.
//   - A terminal phase is final: moving to any other phase is refused.
//   - Conditions follow metav1.Condition: lastTransitionTime changes only when the status does;
//     each carries its own observedGeneration; reasons match the API's pattern.
package status

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// The run kinds (AgentRun, OrchestrationRun) share AgentRun's phases.
const (
	PhasePending   = agentsv1alpha1.PhasePending
	PhaseRunning   = agentsv1alpha1.PhaseRunning
	PhaseSucceeded = agentsv1alpha1.PhaseSucceeded
	PhaseFailed    = agentsv1alpha1.PhaseFailed
	PhaseCancelled = agentsv1alpha1.PhaseCancelled
)

// IsTerminal reports whether phase is final.
func IsTerminal(phase string) bool {
	return phase == PhaseSucceeded || phase == PhaseFailed || phase == PhaseCancelled
}

// Errors the contract refuses a request with; status-writer maps them to gRPC codes.
var (
	// ErrInvalid: the request itself is malformed (InvalidArgument).
	ErrInvalid = errors.New("invalid status request")
	// ErrPrecondition: the request conflicts with the object's state (FailedPrecondition).
	ErrPrecondition = errors.New("status precondition failed")
)

// Fields are the status fields the contract governs, common to every agentplane kind.
type Fields struct {
	Phase              string
	Reason             string
	Message            string
	ObservedGeneration int64
	UpdatedAt          *metav1.MicroTime
	StartedAt          *metav1.Time
	FinishedAt         *metav1.Time
	Conditions         []metav1.Condition
}

// Request is what a caller asks to write.
type Request struct {
	// ObservedGeneration is the metadata.generation the caller reconciled; required.
	ObservedGeneration int64
	// Phase is the new phase; empty keeps the current one.
	Phase string
	// Reason and Message describe the phase; they replace the current ones, except in a request
	// with no phase, reason or message (conditions only), which keeps them.
	Reason  string
	Message string
	// Conditions are set by type; types not named keep their current value. LastTransitionTime
	// is ignored (the contract computes it); an ObservedGeneration of 0 means the request's.
	Conditions []metav1.Condition
}

// Phases lists the phases a kind accepts; nil accepts any non-empty phase.
type Phases []string

// RunPhases are the phases of AgentRun and OrchestrationRun.
var RunPhases = Phases{PhasePending, PhaseRunning, PhaseSucceeded, PhaseFailed, PhaseCancelled}

var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

const (
	maxReasonLen  = 1024
	maxMessageLen = 32768
)

// Apply returns the status that results from writing req over cur on an object whose
// metadata.generation is generation, at time now. It never modifies cur.
func Apply(cur Fields, generation int64, req Request, phases Phases, now time.Time) (Fields, error) {
	if err := validate(req, phases); err != nil {
		return Fields{}, err
	}
	if req.ObservedGeneration > generation {
		return Fields{}, fmt.Errorf("%w: observedGeneration %d is ahead of the object's generation %d; reconcile the object as it is now",
			ErrPrecondition, req.ObservedGeneration, generation)
	}
	if req.ObservedGeneration < cur.ObservedGeneration {
		return Fields{}, fmt.Errorf("%w: observedGeneration %d is older than the %d already recorded; re-read the object and reconcile again",
			ErrPrecondition, req.ObservedGeneration, cur.ObservedGeneration)
	}
	phase := req.Phase
	if phase == "" {
		phase = cur.Phase
	}
	if IsTerminal(cur.Phase) && phase != cur.Phase {
		return Fields{}, fmt.Errorf("%w: phase %s is terminal and cannot change to %s", ErrPrecondition, cur.Phase, phase)
	}

	reason, message := req.Reason, req.Message
	if req.Phase == "" && reason == "" && message == "" {
		reason, message = cur.Reason, cur.Message
	}
	out := Fields{
		Phase:              phase,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: req.ObservedGeneration,
		UpdatedAt:          nextUpdatedAt(cur.UpdatedAt, now),
		StartedAt:          cur.StartedAt.DeepCopy(),
		FinishedAt:         cur.FinishedAt.DeepCopy(),
		Conditions:         copyConditions(cur.Conditions),
	}
	stamp := metav1.NewTime(now.UTC().Truncate(time.Second))
	if out.StartedAt == nil && (phase == PhaseRunning || phase == PhaseSucceeded) {
		out.StartedAt = &stamp
	}
	if out.FinishedAt == nil && IsTerminal(phase) {
		out.FinishedAt = &stamp
	}
	for _, c := range req.Conditions {
		if c.ObservedGeneration == 0 {
			c.ObservedGeneration = req.ObservedGeneration
		}
		c.LastTransitionTime = metav1.NewTime(stamp.Time)
		meta.SetStatusCondition(&out.Conditions, c)
	}
	return out, nil
}

// nextUpdatedAt is now, or just after prev when the clock has not moved past it, so that every
// write is visible in updatedAt.
func nextUpdatedAt(prev *metav1.MicroTime, now time.Time) *metav1.MicroTime {
	t := now.UTC().Truncate(time.Microsecond)
	if prev != nil && !t.After(prev.Time) {
		t = prev.Add(time.Microsecond)
	}
	mt := metav1.NewMicroTime(t)
	return &mt
}

func copyConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func validate(req Request, phases Phases) error {
	var errs []error
	if req.ObservedGeneration <= 0 {
		errs = append(errs, errors.New("observedGeneration must be the object's metadata.generation (at least 1)"))
	}
	if req.Phase != "" && phases != nil && !contains(phases, req.Phase) {
		errs = append(errs, fmt.Errorf("phase %q is not one of %v", req.Phase, []string(phases)))
	}
	if req.Reason != "" {
		if err := checkReason(req.Reason); err != nil {
			errs = append(errs, fmt.Errorf("reason: %w", err))
		}
	}
	if len(req.Message) > maxMessageLen {
		errs = append(errs, fmt.Errorf("message is %d bytes, more than %d", len(req.Message), maxMessageLen))
	}
	seen := map[string]bool{}
	for i, c := range req.Conditions {
		at := fmt.Sprintf("conditions[%d]", i)
		if msgs := validation.IsQualifiedName(c.Type); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.type %q: %s", at, c.Type, msgs[0]))
		}
		if seen[c.Type] {
			errs = append(errs, fmt.Errorf("%s.type %q appears twice", at, c.Type))
		}
		seen[c.Type] = true
		switch c.Status {
		case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
		default:
			errs = append(errs, fmt.Errorf("%s.status %q must be True, False or Unknown", at, c.Status))
		}
		if err := checkReason(c.Reason); err != nil {
			errs = append(errs, fmt.Errorf("%s.reason: %w", at, err))
		}
		if len(c.Message) > maxMessageLen {
			errs = append(errs, fmt.Errorf("%s.message is %d bytes, more than %d", at, len(c.Message), maxMessageLen))
		}
		if c.ObservedGeneration < 0 || c.ObservedGeneration > req.ObservedGeneration {
			errs = append(errs, fmt.Errorf("%s.observedGeneration %d must be between 0 and the request's %d", at, c.ObservedGeneration, req.ObservedGeneration))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

func checkReason(r string) error {
	if len(r) > maxReasonLen {
		return fmt.Errorf("%d characters, more than %d", len(r), maxReasonLen)
	}
	if !reasonPattern.MatchString(r) {
		return fmt.Errorf("%q must be a CamelCase word matching %s", r, reasonPattern)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
