// Package cancel is the cancel protocol both kinds follow (seed 003): what cancel-propagator does
// with an OrchestrationRun or AgentRun whose spec.cancel is true before and after it stops the
// run's children, and what it keeps in memory meanwhile. The kinds' reconcilers (packages
// orchestrationrun and agentrun) stop the children; package wiring runs them.
//
// For a run that is not finished, Begin records Cancelled=Unknown (CancelRequested) and a Normal
// event. A child already finished or gone counts as done. When nothing is left, or when the
// timeout has passed since the request, Finish writes the run Cancelled (Cancelled=True, reason
// Cancelled or CancelTimedOut naming what still ran) through status-writer, which sets finishedAt.
// A Succeeded or Failed run keeps its phase and gets Cancelled=False with reason
// CancelIgnoredTerminal; with cancel support off, reason CancelDisabled. The steps of an
// OrchestrationRun whose cancel goes on are the OrchestrationRun's to stop (TakesSteps), and each
// is written Cancelled once, without events (FinishStep). run-controller starts
// nothing for a run whose cancel is set (it checks live before creating a Job or a step's
// AgentRun).
package cancel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// CondCancelled is the condition cancel-propagator sets on the runs it handles.
const CondCancelled = reasons.CondCancelled

// The variables the protocol's messages name (package wiring reads them).
const (
	EnvEnabled = "JANGAR_ORCHESTRATION_CANCEL_ENABLED"
	EnvTimeout = "JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS"
)

// The kinds cancel-propagator reconciles, one queue each.
const (
	KindOrchestrationRun = "OrchestrationRun"
	KindAgentRun         = "AgentRun"
)

// The informer indexes the reconcilers look children up by.
const (
	ByOwner  = "owner"  // AgentRuns by OrchestrationRun, Jobs by AgentRun: "<ns>/<owner name>"
	ByJobUID = "jobuid" // pods by their Job's UID
)

// Key names a run across both queues: "<kind>/<namespace>/<name>".
func Key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// Options are what the protocol talks to and how it behaves.
type Options struct {
	// Enabled is whether cancel support is on.
	Enabled bool
	// Timeout bounds a cancel: once it passes the run is Cancelled anyway.
	Timeout time.Duration
	// Kube asks discovery whether Argo's Workflows are served.
	Kube kubernetes.Interface
	// Dynamic may be nil: then Argo Workflows are not looked for.
	Dynamic dynamic.Interface
	// Status writes the runs' status.
	Status statusclient.Writer
	// Events emits events about the runs.
	Events eventclient.Emitter
	// Registry may be nil.
	Registry prometheus.Registerer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// EnqueueAfter adds the run named by a Key to its kind's queue after a while.
	EnqueueAfter func(key string, d time.Duration)
}

// Protocol is the cancel protocol's state and metrics, one per process, shared by the
// reconcilers of both kinds.
type Protocol struct {
	o Options

	mu        sync.Mutex
	requested map[types.UID]time.Time            // when this process first saw each cancel
	acted     map[types.UID]map[string]int       // what each cancel stopped, by kind
	jobUIDs   map[types.UID]map[types.UID]string // each cancelled run's Jobs, by UID, to find their pods once the Job is gone
	done      map[types.UID]bool                 // runs this process wrote Cancelled (the cache may lag)
	jobRun    map[types.UID]string               // a cancelled run's Jobs (by UID) to the run's queue key
	podsHit   map[types.UID]bool                 // pods this process asked to delete
	jobsHit   map[types.UID]bool                 // Jobs this process deleted (its cache may not show it yet)
	stepsHit  map[types.UID]bool                 // step runs whose spec.cancel this process set (its cache may not show it yet)
	deletedAt map[types.UID]time.Time            // when this process deleted each cancelled run's Jobs without finalizers, by UID (LeftToGC)
	argo      struct {
		checked time.Time
		served  bool
	}

	cancels  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	stopped  *prometheus.CounterVec
}

// New builds the protocol and registers its metrics with o.Registry.
func New(o Options) *Protocol {
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Protocol{
		o: o, requested: map[types.UID]time.Time{},
		acted: map[types.UID]map[string]int{}, jobUIDs: map[types.UID]map[types.UID]string{}, done: map[types.UID]bool{},
		jobRun: map[types.UID]string{}, podsHit: map[types.UID]bool{}, jobsHit: map[types.UID]bool{}, stepsHit: map[types.UID]bool{}, deletedAt: map[types.UID]time.Time{},
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_cancel_propagator_cancels_total",
			Help: "Cancel requests handled, by kind and outcome (Cancelled, CancelTimedOut, CancelIgnoredTerminal, CancelDisabled).",
		}, []string{"kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentplane_cancel_propagator_cancel_seconds",
			Help:    "Time from a cancel request to the run's Cancelled status, by kind.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"kind"}),
		stopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_cancel_propagator_children_terminated_total",
			Help: "Children a cancel terminated, by kind (AgentRun: cancel set; Job: deleted; Pod: deleted; Workflow: shut down and deleted).",
		}, []string{"kind"}),
	}
	for _, kind := range []string{KindOrchestrationRun, KindAgentRun} { // series exist before the first cancel, for alerts
		for _, outcome := range []string{reasons.Cancelled, reasons.CancelTimedOut, reasons.CancelIgnoredTerminal, reasons.CancelDisabled} {
			p.cancels.WithLabelValues(kind, outcome)
		}
	}
	for _, kind := range []string{KindOrchestrationRun, KindAgentRun} { // dashboards show 0 rather than no data
		p.duration.WithLabelValues(kind)
	}
	for _, kind := range []string{KindAgentRun, "Job", "Pod", "Workflow"} {
		p.stopped.WithLabelValues(kind)
	}
	if r := o.Registry; r != nil {
		r.MustRegister(p.cancels, p.duration, p.stopped)
	}
	return p
}

// EnqueueAfter looks at the run named by k (Key) again after d.
func (p *Protocol) EnqueueAfter(k string, d time.Duration) { p.o.EnqueueAfter(k, d) }

// Run is what a cancel needs of either kind.
type Run struct {
	// Kind and APIVersion name the run's kind; with APIVersion "" no event is emitted.
	Kind, APIVersion string
	Meta             metav1.ObjectMeta
	Phase            string
	// Conds are the run's status conditions, where its Cancelled condition is looked up.
	Conds []metav1.Condition
}

// Begin handles what is common to both kinds before anything is stopped (what names it, for
// the CancelRequested message). It reports whether the cancel goes on, and when it was requested.
func (p *Protocol) Begin(ctx context.Context, r Run, what string) (bool, time.Time, error) {
	c := meta.FindStatusCondition(r.Conds, CondCancelled)
	p.mu.Lock()
	done := p.done[r.Meta.UID]
	at, seen := p.requested[r.Meta.UID]
	p.mu.Unlock()
	switch planCancel(r.Phase, c, done, p.o.Enabled) {
	case cancelNothing:
		return false, time.Time{}, nil
	case cancelIgnoreTerminal:
		msg := fmt.Sprintf("the run had already %s; cancel changes nothing", r.Phase)
		if err := p.Write(ctx, r, "", "", "", Cond(metav1.ConditionFalse, reasons.CancelIgnoredTerminal, msg)); err != nil {
			return false, time.Time{}, err
		}
		p.cancels.WithLabelValues(r.Kind, reasons.CancelIgnoredTerminal).Inc()
		p.emit(ctx, r, corev1.EventTypeNormal, reasons.CancelIgnoredTerminal, msg)
		return false, time.Time{}, nil
	case cancelDisabled:
		msg := "cancel support is disabled (" + EnvEnabled + "=false): the cancel is refused and the run goes on as if it had not been asked (turning cancel back on does not revive it); delete the run to stop it"
		if err := p.Write(ctx, r, "", "", "", Cond(metav1.ConditionFalse, reasons.CancelDisabled, msg)); err != nil {
			return false, time.Time{}, err
		}
		p.cancels.WithLabelValues(r.Kind, reasons.CancelDisabled).Inc()
		p.emit(ctx, r, corev1.EventTypeWarning, reasons.CancelDisabled, msg)
		return false, time.Time{}, nil
	case cancelResume:
		if !seen {
			// A restart: the condition keeps when the request was first recorded.
			at = c.LastTransitionTime.Time
			p.mu.Lock()
			p.requested[r.Meta.UID] = at
			p.mu.Unlock()
		}
		return true, at, nil
	}
	if seen { // requested by this process; the cache has not shown its condition yet
		return true, at, nil
	}
	at = p.o.Now()
	msg := "cancel requested; stopping " + what
	if err := p.Write(ctx, r, "", reasons.CancelRequested, msg, Cond(metav1.ConditionUnknown, reasons.CancelRequested, msg)); err != nil {
		return false, time.Time{}, err
	}
	p.mu.Lock()
	p.requested[r.Meta.UID] = at
	p.mu.Unlock()
	p.emit(ctx, r, corev1.EventTypeNormal, reasons.CancelRequested, msg)
	return true, at, nil
}

// cancelStep is what a cancelled run's reconcile does first.
type cancelStep int

const (
	cancelNothing        cancelStep = iota // already Cancelled (or this process wrote it), or its no-op recorded
	cancelIgnoreTerminal                   // record CancelIgnoredTerminal: the run had already finished
	cancelDisabled                         // record CancelDisabled: cancel support is off
	cancelResume                           // go on stopping: the request is recorded (its condition says since when)
	cancelRequest                          // record CancelRequested, then stop everything
)

// planCancel decides a cancel's first step from the run's phase, its Cancelled condition (nil for
// none), whether this process already wrote it Cancelled, and whether cancel support is on.
func planCancel(phase string, c *metav1.Condition, doneHere, enabled bool) cancelStep {
	switch {
	case phase == agentsv1alpha1.PhaseCancelled || doneHere:
		return cancelNothing
	case c != nil && c.Reason == reasons.CancelDisabled:
		// Refused while cancel support was off: it stays refused (agentsv1alpha1.CancelRefused).
		return cancelNothing
	case phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed:
		if c != nil && c.Reason == reasons.CancelIgnoredTerminal {
			return cancelNothing
		}
		return cancelIgnoreTerminal
	case !enabled:
		return cancelDisabled
	case c != nil && c.Reason == reasons.CancelRequested:
		return cancelResume
	}
	return cancelRequest
}

// finishReason is whether a cancel ends now, and how: Cancelled once nothing is left,
// CancelTimedOut once the timeout has passed with something still running.
func finishReason(left int, elapsed, timeout time.Duration) (bool, string) {
	switch {
	case left == 0:
		return true, reasons.Cancelled
	case elapsed >= timeout:
		return true, reasons.CancelTimedOut
	}
	return false, ""
}

// Finish writes the run Cancelled once nothing is left, or once the timeout has passed since at
// (the request); otherwise it looks at the run (queue key k) again shortly. It reports whether
// the run was written Cancelled.
func (p *Protocol) Finish(ctx context.Context, r Run, k string, at time.Time, left []string) (bool, error) {
	elapsed := p.o.Now().Sub(at)
	end, reason := finishReason(len(left), elapsed, p.o.Timeout)
	if !end {
		// Events bring the run back as its children stop; a look every 2s is the safety net.
		p.o.EnqueueAfter(k, min(2*time.Second, p.o.Timeout-elapsed))
		return false, nil
	}
	msg := "cancelled"
	if stopped := p.StoppedSummary(r.Meta.UID); stopped != "" {
		msg += "; stopped " + stopped
	}
	if reason == reasons.CancelTimedOut {
		msg = fmt.Sprintf("cancel timed out after %s (%s); still running: %s", p.o.Timeout, EnvTimeout, strings.Join(left, ", "))
	}
	if err := p.Write(ctx, r, agentsv1alpha1.PhaseCancelled, reason, msg, Cond(metav1.ConditionTrue, reason, msg)); err != nil {
		return false, err
	}
	p.cancels.WithLabelValues(r.Kind, reason).Inc()
	p.duration.WithLabelValues(r.Kind).Observe(elapsed.Seconds())
	p.settle(r.Meta.UID)
	typ := corev1.EventTypeNormal
	if reason == reasons.CancelTimedOut {
		typ = corev1.EventTypeWarning
	}
	p.emit(ctx, r, typ, reason, msg)
	logging.FromContext(ctx).Info("run cancelled", "kind", r.Kind, "run", r.Meta.Namespace+"/"+r.Meta.Name, "reason", reason, "took", elapsed)
	return true, nil
}

// settle drops what the protocol kept about the cancel of the run with uid, which this process
// wrote Cancelled, and remembers that it did (Done).
func (p *Protocol) settle(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked(uid)
	p.done[uid] = true
}

// dropLocked drops what the protocol kept about the cancel of the run with uid, but whether this
// process wrote it Cancelled. p.mu is held.
func (p *Protocol) dropLocked(uid types.UID) {
	delete(p.requested, uid)
	delete(p.acted, uid)
	delete(p.stepsHit, uid)
	for job := range p.jobUIDs[uid] {
		delete(p.jobRun, job)
		delete(p.deletedAt, job)
	}
	delete(p.jobUIDs, uid)
}

// TakesSteps reports whether the cancel of the OrchestrationRun or goes on (requested, not yet
// written Cancelled, cancel support on). While it does, the OrchestrationRun's passes stop its
// unfinished steps and write each Cancelled (FinishStep), and the steps' own cancels leave them
// to it: a step costs one status write and no events of its own. Once the OrchestrationRun is
// Cancelled, a step that appears late is cancelled on its own again.
func (p *Protocol) TakesSteps(or *orchv1alpha1.OrchestrationRun) bool {
	if !or.Spec.Cancel || or.DeletionTimestamp != nil {
		return false
	}
	p.mu.Lock()
	done := p.done[or.UID]
	p.mu.Unlock()
	switch planCancel(or.Status.Phase, meta.FindStatusCondition(or.Status.Conditions, CondCancelled), done, p.o.Enabled) {
	case cancelRequest, cancelResume:
		return true
	}
	return false
}

// FinishStep writes step, a step run the pass of its OrchestrationRun (called parent) stopped,
// Cancelled (Cancelled=True, reason Cancelled, a message naming the OrchestrationRun and what was
// stopped): its only status write of the cancel, and no event (the OrchestrationRun's events say
// what was stopped). at is when the OrchestrationRun's cancel was requested.
func (p *Protocol) FinishStep(ctx context.Context, step Run, parent string, at time.Time) error {
	msg := "cancelled with its OrchestrationRun " + parent
	if stopped := p.StoppedSummary(step.Meta.UID); stopped != "" {
		msg += "; stopped " + stopped
	}
	step.APIVersion = "" // no event
	if err := p.Write(ctx, step, agentsv1alpha1.PhaseCancelled, reasons.Cancelled, msg, Cond(metav1.ConditionTrue, reasons.Cancelled, msg)); err != nil {
		return err
	}
	p.cancels.WithLabelValues(KindAgentRun, reasons.Cancelled).Inc()
	p.duration.WithLabelValues(KindAgentRun).Observe(p.o.Now().Sub(at).Seconds())
	p.settle(step.Meta.UID)
	return nil
}

// MarkStep remembers that this process set spec.cancel on the step run with uid, and reports
// whether it already had: a second pass may run before the cache shows the first one's patch.
func (p *Protocol) MarkStep(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	hit := p.stepsHit[uid]
	p.stepsHit[uid] = true
	return hit
}

// ForgetStep undoes MarkStep: the patch failed.
func (p *Protocol) ForgetStep(uid types.UID) {
	p.mu.Lock()
	delete(p.stepsHit, uid)
	p.mu.Unlock()
}

// Record counts what a cancel stopped (n children of kind, under run), for its final message and
// the metric.
func (p *Protocol) Record(run types.UID, kind string, n int) {
	if n == 0 {
		return
	}
	p.stopped.WithLabelValues(kind).Add(float64(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.acted[run] == nil {
		p.acted[run] = map[string]int{}
	}
	p.acted[run][kind] += n
}

// StoppedSummary says what the cancel of run stopped so far, as its final message does
// ("1 AgentRun(s), 2 Job(s)"); "" for nothing.
func (p *Protocol) StoppedSummary(run types.UID) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for _, kind := range []string{KindAgentRun, "Job", "Pod", "Workflow"} {
		if n := p.acted[run][kind]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s(s)", n, kind))
		}
	}
	return strings.Join(parts, ", ")
}

// IsTerminal reports whether a run's phase is final.
func IsTerminal(phase string) bool {
	return phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed || phase == agentsv1alpha1.PhaseCancelled
}

// Cond is the Cancelled condition with status, reason and message.
func Cond(status metav1.ConditionStatus, reason, message string) *pb.Condition {
	return &pb.Condition{Type: CondCancelled, Status: string(status), Reason: reason, Message: message}
}

// Write records the run's status through status-writer; phase "" keeps the phase.
func (p *Protocol) Write(ctx context.Context, r Run, phase, reason, message string, c *pb.Condition) error {
	_, err := p.o.Status.Write(ctx, statusclient.Request(r.Kind, &r.Meta, r.Meta.Generation, phase, reason, message, c))
	switch err := statusclient.Outcome(err); {
	case err == nil:
		return nil
	case errors.Is(err, statusclient.ErrStale):
		return controller.Waiting(err) // the run moved on: the retry reads the newer object
	default:
		return fmt.Errorf("write %s %s/%s status: %w", r.Kind, r.Meta.Namespace, r.Meta.Name, err)
	}
}

// emit sends an event about the run through event-emitter; a failure is logged, never returned.
func (p *Protocol) emit(ctx context.Context, r Run, typ, reason, note string) {
	if r.APIVersion != "" {
		eventclient.Notify(ctx, p.o.Events, r.APIVersion, r.Kind, &r.Meta, typ, reason, "Cancel", note)
	}
}
