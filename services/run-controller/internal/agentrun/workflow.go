package agentrun

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// reconcileWorkflowRun runs a workflow-runtime run: its steps one Job at a time, in order, each
// step retried up to its retries with its retryBackoffSeconds between attempts. A step's
// progress comes from its Jobs; once its outcome is in status, status is the record (its Jobs
// may be garbage-collected by then). planWorkflow decides; this function acts on the decision.
func (c *Reconciler) reconcileWorkflowRun(ctx context.Context, ar *agentsv1alpha1.AgentRun) (core.Result, error) {
	if p := checkWorkflow(ar.Spec.Workflow); p != nil {
		return core.Result{}, c.stop(ctx, ar, p)
	}
	recorded := map[string]agentsv1alpha1.WorkflowStepStatus{}
	if ar.Status.Workflow != nil {
		for _, s := range ar.Status.Workflow.Steps {
			recorded[s.Name] = s
		}
	}
	byStep := jobsByStep(c.JobsOf(ar.Namespace, ar.Name))
	started := hasStarted(ar) || len(byStep) > 0
	if started {
		c.limits.markActive(ar)
	}
	now := metav1.NewTime(c.Now())
	plan := planWorkflow(ar.Spec.Workflow.Steps, recorded, byStep, c.PodRunning, now)
	if plan.start >= 0 {
		agent, p := c.prepare(ctx, ar)
		if p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		base, p := c.baseWork(ar, agent)
		if p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		w := stepWork(base, ar.Spec.Workflow.Steps[plan.start], plan.startAttempt)
		if p := c.checkImage(w.image, agent); p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		j, r, p := c.startJob(ctx, ar, w, !started)
		if p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		if j == nil {
			return r, nil // queued
		}
		rec := &plan.steps[plan.start]
		rec.Attempt, rec.JobRef, rec.NextRetryAt = plan.startAttempt, refOf(j), nil
		setStepPhase(rec, agentsv1alpha1.PhasePending, "Job "+j.Name+" created; waiting for its pod to run", now)
	}
	return core.Result{RequeueAfter: plan.requeueAfter}, c.setRunStatus(ctx, ar, workflowStatus(ar, plan, now))
}

// checkWorkflow is the problem with a workflow's steps that no retry mends, or nil.
func checkWorkflow(wf *agentsv1alpha1.WorkflowSpec) *core.Problem {
	if wf == nil || len(wf.Steps) == 0 {
		return &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: "runtime workflow needs spec.workflow.steps"}
	}
	seen := map[string]bool{}
	for _, s := range wf.Steps {
		if seen[s.Name] {
			return &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: fmt.Sprintf("workflow step %q appears twice", s.Name)}
		}
		seen[s.Name] = true
	}
	return nil
}

// jobsByStep indexes a run's Jobs by step label and attempt.
func jobsByStep(jobs []*batchv1.Job) map[string]map[int32]*batchv1.Job {
	byStep := map[string]map[int32]*batchv1.Job{}
	for _, j := range jobs {
		step := j.Labels[agentsv1alpha1.LabelWorkflowStep]
		n, err := strconv.ParseInt(j.Labels[agentsv1alpha1.LabelAttempt], 10, 32)
		if step == "" || err != nil {
			continue
		}
		if byStep[step] == nil {
			byStep[step] = map[int32]*batchv1.Job{}
		}
		byStep[step][int32(n)] = j
	}
	return byStep
}

// workflowPlan is what a workflow run's steps say now, before anything is created.
type workflowPlan struct {
	// steps is every step's status, in spec order.
	steps []agentsv1alpha1.WorkflowStepStatus
	// start is the index of the step whose attempt startAttempt is due now, or -1.
	start        int32
	startAttempt int32
	// phase, reason and message are set when a step has failed for good (Failed).
	phase, reason, message string
	// requeueAfter is when a step's retry backoff ends.
	requeueAfter time.Duration
}

// planWorkflow decides a workflow run's next move from its recorded step statuses and its Jobs
// (by step and attempt): steps run in order, one at a time; a succeeded step lets the next start;
// a failed attempt is retried after the step's backoff until its retries run out, which fails
// the run; a step whose Job is gone before its outcome was recorded waits (job-gc reports it).
// running tells whether a Job's pod has run.
func planWorkflow(specs []agentsv1alpha1.WorkflowStep, recorded map[string]agentsv1alpha1.WorkflowStepStatus,
	byStep map[string]map[int32]*batchv1.Job, running func(*batchv1.Job) bool, now metav1.Time) workflowPlan {
	plan := workflowPlan{start: -1}
	blocked := false // a step is in progress or failed: later steps wait
	for i, spec := range specs {
		rec := recorded[spec.Name]
		rec.Name = spec.Name
		maxAttempts := spec.Retries + 1
		switch {
		case blocked:
			if rec.Phase == "" {
				rec.Phase = agentsv1alpha1.PhasePending
			}
		case rec.Phase == agentsv1alpha1.PhaseSucceeded:
		case rec.Phase == agentsv1alpha1.PhaseFailed && rec.Attempt >= maxAttempts:
			blocked = true
			plan.phase, plan.reason, plan.message = agentsv1alpha1.PhaseFailed, ReasonStepFailed,
				fmt.Sprintf("step %s failed after %d attempt(s): %s", spec.Name, rec.Attempt, rec.Message)
		default:
			var next int32
			rec, next = planStep(&plan, spec, rec, byStep[core.LabelValue(spec.Name)], running, now)
			if next > 0 {
				plan.start, plan.startAttempt = int32(i), next
			}
			blocked = rec.Phase != agentsv1alpha1.PhaseSucceeded
		}
		plan.steps = append(plan.steps, rec)
	}
	return plan
}

// planStep is the status of the step now in progress (the first not yet succeeded) from its
// newest Job, and the attempt to start now (0: none).
func planStep(plan *workflowPlan, spec agentsv1alpha1.WorkflowStep, rec agentsv1alpha1.WorkflowStepStatus,
	jobs map[int32]*batchv1.Job, running func(*batchv1.Job) bool, now metav1.Time) (agentsv1alpha1.WorkflowStepStatus, int32) {
	var attempt int32
	for n := range jobs {
		attempt = max(attempt, n)
	}
	if attempt == 0 {
		if rec.JobRef != nil {
			// Its Job is gone before its outcome was recorded: job-gc reports WorkflowJobMissing.
			return rec, 0
		}
		return rec, 1
	}
	j := jobs[attempt]
	rec.Attempt, rec.JobRef = attempt, refOf(j)
	if rec.StartedAt == nil && j.Status.StartTime != nil {
		rec.StartedAt = j.Status.StartTime
	}
	done, failed, r, msg := jobOutcome(j)
	switch {
	case done && !failed:
		setStepPhase(&rec, agentsv1alpha1.PhaseSucceeded, "", now)
		rec.FinishedAt, rec.NextRetryAt = j.Status.CompletionTime, nil
		if rec.FinishedAt == nil {
			rec.FinishedAt = &now
		}
	case done && attempt >= spec.Retries+1:
		setStepPhase(&rec, agentsv1alpha1.PhaseFailed, r+": "+msg, now)
		rec.FinishedAt, rec.NextRetryAt = &now, nil
		plan.phase, plan.reason, plan.message = agentsv1alpha1.PhaseFailed, ReasonStepFailed,
			fmt.Sprintf("step %s failed after %d attempt(s): %s", spec.Name, attempt, msg)
	case done:
		at := metav1.NewTime(failedAt(j).Add(secondsOf(spec.RetryBackoffSeconds)))
		if !at.After(now.Time) {
			return rec, attempt + 1
		}
		setStepPhase(&rec, ReasonRetrying, fmt.Sprintf("attempt %d failed (%s); attempt %d at %s", attempt, r, attempt+1, at.UTC().Format("15:04:05")), now)
		rec.NextRetryAt = &at
		plan.requeueAfter = at.Sub(now.Time)
	case running(j):
		setStepPhase(&rec, agentsv1alpha1.PhaseRunning, "", now)
	default:
		setStepPhase(&rec, agentsv1alpha1.PhasePending, "Job "+j.Name+" created; waiting for its pod to run", now)
	}
	return rec, 0
}

// stepWork is the Job of a step's attempt: the run's work with what the step overrides.
func stepWork(base work, spec agentsv1alpha1.WorkflowStep, attempt int32) work {
	w := base
	w.step, w.attempt, w.retries = spec.Name, attempt, 0
	if spec.Workload != nil {
		if spec.Workload.Image != "" {
			w.image = spec.Workload.Image
		}
		if spec.Workload.Resources != nil {
			w.res = spec.Workload.Resources
		}
		if len(spec.Workload.Volumes) > 0 {
			w.volumes = spec.Workload.Volumes
		}
	}
	if len(spec.Parameters) > 0 {
		w.params = maps.Clone(base.params)
		if w.params == nil {
			w.params = map[string]string{}
		}
		maps.Copy(w.params, spec.Parameters)
	}
	if spec.TimeoutSeconds > 0 {
		w.timeout = spec.TimeoutSeconds
	}
	if spec.Implementation != nil {
		w.impl = spec.Implementation.Inline.Text
	}
	if spec.ImplementationSpecRef != nil {
		w.implRef = spec.ImplementationSpecRef.Name
	}
	return w
}

// workflowStatus is the run's status from its steps: Failed when a step failed for good,
// Succeeded when every step did, else Running once any step ran (Pending before).
func workflowStatus(ar *agentsv1alpha1.AgentRun, plan workflowPlan, now metav1.Time) runStatus {
	steps := plan.steps
	runPhase, reason, message := plan.phase, plan.reason, plan.message
	if runPhase == "" {
		runPhase, reason, message = agentsv1alpha1.PhaseSucceeded, ReasonCompleted, "every step succeeded"
		for _, s := range steps {
			if s.Phase != agentsv1alpha1.PhaseSucceeded {
				runPhase, reason, message = agentsv1alpha1.PhasePending, reasons.JobCreated, "step "+s.Name+": "+s.Phase
				if s.Phase == agentsv1alpha1.PhaseRunning || ranAny(steps) || ar.Status.StartedAt != nil {
					runPhase, reason = agentsv1alpha1.PhaseRunning, ReasonRunning
				}
				break
			}
		}
	}
	wf := &agentsv1alpha1.WorkflowStatus{Phase: runPhase, Steps: steps, LastTransitionTime: &now}
	if ar.Status.Workflow != nil && ar.Status.Workflow.Phase == runPhase {
		wf.LastTransitionTime = ar.Status.Workflow.LastTransitionTime
	}
	st := runStatus{phase: runPhase, reason: reason, message: message, workflow: wf,
		conds: []core.Cond{core.C(CondAccepted, metav1.ConditionTrue, reasons.JobCreated, "the workflow's first Job was created")}}
	if last := lastJobRef(steps); last != nil {
		st.jobRef = last
	}
	switch runPhase {
	case agentsv1alpha1.PhaseSucceeded:
		st.conds = append(st.conds, core.C(CondSucceeded, metav1.ConditionTrue, ReasonCompleted, message))
	case agentsv1alpha1.PhaseFailed:
		st.conds = append(st.conds, core.C(CondSucceeded, metav1.ConditionFalse, reason, message))
	}
	return st
}

func setStepPhase(s *agentsv1alpha1.WorkflowStepStatus, phase, message string, now metav1.Time) {
	if s.Phase != phase {
		s.LastTransitionTime = &now
	}
	s.Phase, s.Message = phase, message
}

// ranAny reports whether any step has run (is running or finished).
func ranAny(steps []agentsv1alpha1.WorkflowStepStatus) bool {
	for _, s := range steps {
		switch s.Phase {
		case agentsv1alpha1.PhaseRunning, agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed, ReasonRetrying:
			return true
		}
	}
	return false
}

// lastJobRef is the newest step Job, recorded as the run's jobRef.
func lastJobRef(steps []agentsv1alpha1.WorkflowStepStatus) *agentsv1alpha1.JobRef {
	var ref *agentsv1alpha1.JobRef
	for _, s := range steps {
		if s.JobRef != nil {
			ref = s.JobRef
		}
	}
	return ref
}

func secondsOf(n int32) time.Duration { return time.Duration(n) * time.Second }
