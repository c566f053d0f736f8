package orchestrationrun

import (
	"context"
	"fmt"
	"maps"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// Condition type of an OrchestrationRun besides Cancelled (libs/reasons).
const CondReady = reasons.CondReady

// Reconciler reconciles OrchestrationRuns: each step an AgentRun it owns, the steps' phases
// aggregated into the run's.
type Reconciler struct {
	*core.Core
}

// New is the OrchestrationRun reconciler on c.
func New(c *core.Core) *Reconciler { return &Reconciler{Core: c} }

// Keys of an Orchestration step's `with` that configure the step's AgentRun rather than pass
// through as parameters.
const (
	withRuntime = "runtime"
	withImage   = "image"
)

// Reconcile starts, for the OrchestrationRun key (namespace/name), one AgentRun per step once the steps it depends on have
// succeeded, and aggregates the steps into the run's phase. A failed step fails the run and
// nothing more starts; once spec.cancel is set nothing new starts at all (cancel-propagator
// stops what runs).
func (c *Reconciler) Reconcile(ctx context.Context, key string) (core.Result, error) {
	ns, name := scaffold.SplitKey(key)
	or, ok := c.OrchRun(ns, name)
	if !ok || or.DeletionTimestamp != nil || core.IsTerminal(or.Status.Phase) || or.CancelInEffect() {
		if !ok {
			c.ForgetWarnings("or:" + core.NsKey(ns, name))
		}
		return core.Result{}, nil
	}
	orch, ok := c.Orchestration(ns, or.Spec.OrchestrationRef.Name)
	if !ok {
		return core.Result{}, c.stopOrch(ctx, or, false, reasons.InvalidSpec, fmt.Sprintf(
			"Orchestration %s not found in namespace %s; the run waits until it exists", or.Spec.OrchestrationRef.Name, ns))
	}
	order, err := topoOrder(orch.Spec.Steps)
	if err != nil {
		return core.Result{}, c.stopOrch(ctx, or, true, reasons.InvalidSpec, fmt.Sprintf("Orchestration %s: %v", orch.Name, err))
	}
	var original *orchv1alpha1.OrchestrationRun
	if or.Spec.RetryOf != "" {
		original, _ = c.OrchRun(ns, or.Spec.RetryOf)
	}
	reused, problem := retried(or, original, orch)
	if problem != "" {
		return core.Result{}, c.stopOrch(ctx, or, true, reasons.InvalidSpec, problem)
	}
	p := progress{children: c.orchChildren(or, orch), reused: reused, starting: map[string]string{}}
	failed := failedSteps(order, p)
	var claimed *orchStatus // what the last start claim wrote
	for _, s := range nextSteps(order, p, failed) {
		// The start claim writes the run's whole status with the step starting: the status this
		// pass ends with, unless a child's status moved meanwhile, so no second write follows.
		p.starting[s.Name] = childName(or, s.Name)
		st := orchestrationStatus(orch, p, failed)
		ar, err := c.createChild(ctx, or, s, st)
		delete(p.starting, s.Name)
		if err != nil || ar == nil { // nil: the run was cancelled meanwhile
			return core.Result{}, err
		}
		p.children[s.Name] = ar
		claimed = &st
	}
	st := orchestrationStatus(orch, p, failed)
	if claimed != nil && claimed.phase == st.phase && claimed.reason == st.reason && claimed.message == st.message &&
		core.SameJSON(claimed.steps, st.steps) && core.SameJSON(claimed.conds, st.conds) {
		return core.Result{}, nil
	}
	if or.Status.Phase == st.phase && or.Status.Reason == st.reason && or.Status.Message == st.message &&
		or.Status.ObservedGeneration == or.Generation && or.Status.RunID == string(or.UID) &&
		core.SameJSON(or.Status.StepStatuses, st.steps) && core.CondsSay(or.Status.Conditions, st.conds) {
		return core.Result{}, nil
	}
	fields, err := statusclient.OrchestrationRunFields(string(or.UID), st.steps)
	if err != nil {
		return core.Result{}, fmt.Errorf("encode OrchestrationRun %s/%s status fields: %w", ns, name, err)
	}
	return core.Result{}, c.WriteStatus(ctx, "OrchestrationRun", ns, name, string(or.UID), or.Generation, st.phase, st.reason, st.message, st.conds, fields)
}

// orchChildren are the run's step AgentRuns in the cache, by step name: those it controls. A
// step this process created that the cache does not show yet counts (Core.RunOrCreated): the
// start claim's status write reaches the OrchestrationRun informer before the AgentRun
// informer shows the create that followed it, and the pass it wakes must not start the step
// again.
func (c *Reconciler) orchChildren(or *orchv1alpha1.OrchestrationRun, orch *orchv1alpha1.Orchestration) map[string]*agentsv1alpha1.AgentRun {
	children := map[string]*agentsv1alpha1.AgentRun{}
	for _, s := range orch.Spec.Steps {
		if ar, ok := c.RunOrCreated(or.Namespace, childName(or, s.Name)); ok {
			if ref := core.ControllerOf(ar.OwnerReferences, "OrchestrationRun"); ref != nil && ref.UID == or.UID {
				children[s.Name] = ar
			}
		}
	}
	return children
}

// progress is what the run's steps have done: the AgentRuns the run started, by step, the
// steps a retry takes from the run it retries (spec.retryOf), which succeeded there, and the
// step whose start is being claimed (its AgentRun's name, by step), not created yet.
type progress struct {
	children map[string]*agentsv1alpha1.AgentRun
	reused   map[string]orchv1alpha1.StepStatus
	starting map[string]string
}

// startingStep is a step whose AgentRun (named run) is starting: claimed or created, with no
// status of its own yet.
func startingStep(s orchv1alpha1.OrchestrationStep, run string) orchv1alpha1.StepStatus {
	return orchv1alpha1.StepStatus{Name: s.Name, Kind: s.Kind, Phase: agentsv1alpha1.PhasePending,
		Message: "starting AgentRun " + run + "; waiting for its pod to run"}
}

// stepPhase is a step's phase from its AgentRun ("" before it exists, Pending before its first
// status), or Succeeded for a step the retry took.
func stepPhase(p progress, step string) string {
	if _, ok := p.reused[step]; ok {
		return agentsv1alpha1.PhaseSucceeded
	}
	if ar := p.children[step]; ar != nil {
		if ar.Status.Phase == "" {
			return agentsv1alpha1.PhasePending
		}
		return ar.Status.Phase
	}
	return ""
}

// failedSteps are the steps (in order) whose AgentRun failed or was cancelled.
func failedSteps(order []orchv1alpha1.OrchestrationStep, p progress) []string {
	var failed []string
	for _, s := range order {
		if ph := stepPhase(p, s.Name); ph == agentsv1alpha1.PhaseFailed || ph == agentsv1alpha1.PhaseCancelled {
			failed = append(failed, s.Name)
		}
	}
	return failed
}

// nextSteps are the DAG's steps to start now, in order: those without an AgentRun, not taken by
// a retry, whose dependencies all succeeded; none once a step failed.
func nextSteps(order []orchv1alpha1.OrchestrationStep, p progress, failed []string) []orchv1alpha1.OrchestrationStep {
	if len(failed) > 0 {
		return nil
	}
	var next []orchv1alpha1.OrchestrationStep
	for _, s := range order {
		if _, taken := p.reused[s.Name]; taken || p.children[s.Name] != nil {
			continue
		}
		ready := true
		for _, d := range s.DependsOn {
			if stepPhase(p, d) != agentsv1alpha1.PhaseSucceeded {
				ready = false
				break
			}
		}
		if ready {
			next = append(next, s)
		}
	}
	return next
}

// orchStatus is what an OrchestrationRun's status says.
type orchStatus struct {
	phase, reason, message string
	conds                  []core.Cond
	steps                  []orchv1alpha1.StepStatus
}

// orchestrationStatus aggregates the steps: Failed once one failed, Succeeded when all did,
// Running once one ran, Pending before.
func orchestrationStatus(orch *orchv1alpha1.Orchestration, p progress, failed []string) orchStatus {
	statuses, allDone, anyRan := stepStatuses(orch, p, failed)
	st := orchStatus{phase: agentsv1alpha1.PhasePending, reason: "Waiting", message: "no step has started running yet", conds: []core.Cond{}, steps: statuses}
	switch {
	case len(failed) > 0:
		ar := p.children[failed[0]]
		st.phase, st.reason = agentsv1alpha1.PhaseFailed, reasons.StepFailed
		st.message = fmt.Sprintf("step %s (AgentRun %s) %s: %s", failed[0], ar.Name, strings.ToLower(ar.Status.Phase), ar.Status.Message)
		st.conds = append(st.conds, core.C(CondReady, metav1.ConditionFalse, reasons.StepFailed, st.message))
	case allDone:
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseSucceeded, reasons.Completed, fmt.Sprintf("all %d steps succeeded", len(statuses))
		st.conds = append(st.conds, core.C(CondReady, metav1.ConditionTrue, reasons.Completed, st.message))
	case anyRan:
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseRunning, reasons.Running, runningMessage(statuses)
	}
	return st
}

func runningMessage(steps []orchv1alpha1.StepStatus) string {
	var running []string
	done := 0
	for _, s := range steps {
		switch s.Phase {
		case agentsv1alpha1.PhaseRunning:
			running = append(running, s.Name)
		case agentsv1alpha1.PhaseSucceeded:
			done++
		}
	}
	return fmt.Sprintf("%d of %d steps succeeded; running: %s", done, len(steps), strings.Join(running, ", "))
}

// childName is the AgentRun name of a step: deterministic, so a retry finds it.
func childName(or *orchv1alpha1.OrchestrationRun, step string) string {
	n := or.Name + "-" + step
	if len(n) <= 253 {
		return strings.ToLower(n)
	}
	return core.Shorten(n, 240) + "-" + core.Hash8(string(or.UID)+"/"+step)
}

// createChild creates a step's AgentRun, owned by the OrchestrationRun, after a start claim that
// writes st, the run's status with the step starting.
func (c *Reconciler) createChild(ctx context.Context, or *orchv1alpha1.OrchestrationRun, s orchv1alpha1.OrchestrationStep, st orchStatus) (*agentsv1alpha1.AgentRun, error) {
	params := maps.Clone(or.Spec.Parameters)
	if params == nil {
		params = map[string]string{}
	}
	runtime := agentsv1alpha1.RuntimeJob
	var workload *agentsv1alpha1.WorkloadSpec
	for k, v := range s.With {
		switch k {
		case withRuntime:
			runtime = v
		case withImage:
			workload = &agentsv1alpha1.WorkloadSpec{Image: v}
		default:
			params[k] = v
		}
	}
	ann := map[string]string{}
	for k, v := range or.Annotations {
		if strings.HasPrefix(k, agentsv1alpha1.AnnotationSimulatePrefix) {
			ann[k] = v
		}
	}
	ar := &agentsv1alpha1.AgentRun{
		TypeMeta: metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{
			Name: childName(or, s.Name), Namespace: or.Namespace, Annotations: ann,
			Labels: map[string]string{
				agentsv1alpha1.LabelOrchestrationRun:  core.LabelValue(or.Name),
				agentsv1alpha1.LabelOrchestrationStep: core.LabelValue(s.Name),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun", Name: or.Name, UID: or.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: agentsv1alpha1.AgentRunSpec{
			AgentRef: agentsv1alpha1.LocalRef{Name: s.AgentRef.Name}, Runtime: agentsv1alpha1.RuntimeSpec{Type: runtime},
			Workload: workload, Parameters: params,
		},
	}
	// A start claim on the run, writing its status with the step starting: refused once the
	// cancel is in, even if the cache has not seen it, so no step starts after a cancel.
	fields, err := statusclient.OrchestrationRunFields(string(or.UID), st.steps)
	if err != nil {
		return nil, fmt.Errorf("encode OrchestrationRun %s/%s step statuses: %w", or.Namespace, or.Name, err)
	}
	if granted, err := c.ClaimWithStatus(ctx, "OrchestrationRun", or.Namespace, or.Name, string(or.UID), or.Generation,
		st.phase, st.reason, st.message, st.conds, fields); err != nil || !granted {
		return nil, err
	}
	runs := c.Client.AgentsV1alpha1().AgentRuns(or.Namespace)
	out, err := runs.Create(ctx, ar, metav1.CreateOptions{FieldManager: core.FieldManager})
	switch {
	case err == nil:
		c.Created(out)
		return out, nil
	case apierrors.IsAlreadyExists(err):
		out, err = runs.Get(ctx, ar.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get AgentRun %s: %w", ar.Name, err)
		}
		if ref := core.ControllerOf(out.OwnerReferences, "OrchestrationRun"); ref == nil || ref.UID != or.UID {
			return nil, c.stopOrch(ctx, or, true, reasons.InvalidSpec, fmt.Sprintf(
				"an AgentRun named %s already exists and is not this run's step %s: delete it or rename the run", ar.Name, s.Name))
		}
		c.Created(out)
		return out, nil
	case apierrors.IsForbidden(err):
		return nil, c.stopOrch(ctx, or, false, reasons.Forbidden, fmt.Sprintf("creating AgentRun %s was refused: %s", ar.Name, core.APIMessage(err)))
	case core.PolicyNotReady(err):
		// Not the step's fault: retried with backoff until kube-apiserver has the policy ready.
		return nil, fmt.Errorf("create AgentRun %s: an admission policy could not run yet (kube-apiserver just started?): %w", ar.Name, err)
	case apierrors.IsInvalid(err):
		return nil, c.stopOrch(ctx, or, true, reasons.InvalidSpec, fmt.Sprintf("the API server refused step %s's AgentRun: %s", s.Name, core.APIMessage(err)))
	default:
		return nil, fmt.Errorf("create AgentRun %s: %w", ar.Name, err)
	}
}

// stopOrch records a problem with an OrchestrationRun: it fails, or waits.
func (c *Reconciler) stopOrch(ctx context.Context, or *orchv1alpha1.OrchestrationRun, fail bool, reason, message string) error {
	phase := agentsv1alpha1.PhasePending
	if fail {
		phase = agentsv1alpha1.PhaseFailed
	}
	if c.WarnOnce("or:"+core.NsKey(or.Namespace, or.Name), reason+"/"+message) {
		core.LogProblem(ctx, "OrchestrationRun", core.NsKey(or.Namespace, or.Name), phase, reason, message)
		c.Emit(ctx, or, "Warning", core.EventReason(reason), "Reconcile", message, false)
	}
	conds := []core.Cond{core.C(CondReady, metav1.ConditionFalse, reason, message)}
	if or.Status.Phase == phase && or.Status.Reason == reason && or.Status.Message == message && core.CondsSay(or.Status.Conditions, conds) {
		if !fail && reason == reasons.Forbidden {
			return scaffold.Waiting(&core.Problem{Reason: reason, Message: message})
		}
		return nil
	}
	if err := c.WriteStatus(ctx, "OrchestrationRun", or.Namespace, or.Name, string(or.UID), or.Generation, phase, reason, message, conds,
		&pb.OrchestrationRunFields{RunId: string(or.UID)}); err != nil {
		return err
	}
	if !fail && reason == reasons.Forbidden {
		return scaffold.Waiting(&core.Problem{Reason: reason, Message: message})
	}
	return nil
}

// Validate checks an Orchestration's steps as every run of it does (Reconcile fails a run of an
// Orchestration it refuses, with InvalidSpec and this error).
func Validate(steps []orchv1alpha1.OrchestrationStep) error {
	_, err := topoOrder(steps)
	return err
}

// topoOrder checks the graph (unique names, known kinds and dependencies, no cycle) and returns
// the steps in an order where every step follows what it depends on.
func topoOrder(steps []orchv1alpha1.OrchestrationStep) ([]orchv1alpha1.OrchestrationStep, error) {
	idx := map[string]int{}
	for i, s := range steps {
		if _, dup := idx[s.Name]; dup {
			return nil, fmt.Errorf("step %q appears twice", s.Name)
		}
		idx[s.Name] = i
		if s.Kind != "AgentRun" {
			return nil, fmt.Errorf("step %s has kind %q; run-controller runs steps of kind AgentRun", s.Name, s.Kind)
		}
		if s.AgentRef == nil || s.AgentRef.Name == "" {
			return nil, fmt.Errorf("step %s of kind AgentRun needs agentRef.name", s.Name)
		}
	}
	indeg := make([]int, len(steps))
	for i, s := range steps {
		for _, d := range s.DependsOn {
			if _, ok := idx[d]; !ok {
				return nil, fmt.Errorf("step %s depends on %q, which is not a step", s.Name, d)
			}
			indeg[i]++
		}
	}
	var order []orchv1alpha1.OrchestrationStep
	var ready []int
	for i := range steps {
		if indeg[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		order = append(order, steps[i])
		for j, s := range steps {
			for _, d := range s.DependsOn {
				if d == steps[i].Name {
					indeg[j]--
					if indeg[j] == 0 {
						ready = append(ready, j)
					}
				}
			}
		}
	}
	if len(order) != len(steps) {
		var cyc []string
		for i, n := range indeg {
			if n > 0 {
				cyc = append(cyc, steps[i].Name)
			}
		}
		return nil, fmt.Errorf("dependsOn has a cycle among steps %s", strings.Join(cyc, ", "))
	}
	return order, nil
}

// stepStatuses is what the run's stepStatuses say of its children: each step's phase, message,
// times and AgentRun, or why it has not started, or, for a step a retry took, what the run it
// retries recorded; and whether all succeeded, and any ran here.
func stepStatuses(orch *orchv1alpha1.Orchestration, p progress, failed []string) ([]orchv1alpha1.StepStatus, bool, bool) {
	var statuses []orchv1alpha1.StepStatus
	allDone, anyRan := true, false
	for _, s := range orch.Spec.Steps {
		st := orchv1alpha1.StepStatus{Name: s.Name, Kind: s.Kind, Phase: agentsv1alpha1.PhasePending}
		if taken, ok := p.reused[s.Name]; ok {
			st = taken
		} else if run, ok := p.starting[s.Name]; ok {
			st = startingStep(s, run)
		} else if ar := p.children[s.Name]; ar != nil && (ar.Status.Phase == "" ||
			ar.Status.Phase == agentsv1alpha1.PhasePending && ar.Status.Reason == reasons.JobCreated) {
			// A step run with no status yet, or whose Job waits for its pod, says what its start
			// claim wrote, until its pod runs (or it is held up, or finishes): no write of the
			// OrchestrationRun's for the Job's creation.
			st = startingStep(s, ar.Name)
		} else if ar != nil {
			st.Phase = ar.Status.Phase
			st.Message = ar.Status.Message
			st.StartedAt, st.FinishedAt = ar.Status.StartedAt, ar.Status.FinishedAt
			st.ResourceRef = &orchv1alpha1.ResourceRef{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Name: ar.Name, Namespace: ar.Namespace, UID: string(ar.UID)}
			if st.Phase != agentsv1alpha1.PhasePending {
				anyRan = true
			}
		} else if len(failed) > 0 {
			st.Message = "not started: step " + failed[0] + " failed"
		} else {
			st.Message = "waiting for " + strings.Join(s.DependsOn, ", ")
		}
		if st.Phase != agentsv1alpha1.PhaseSucceeded {
			allDone = false
		}
		statuses = append(statuses, st)
	}
	return statuses, allDone, anyRan
}
