package controller

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
)

// reconcileWorkflowRun runs a workflow-runtime run: its steps one Job at a time, in order, each
// step retried up to its retries with its retryBackoffSeconds between attempts. A step's
// progress comes from its Jobs; once its outcome is in status, status is the record (its Jobs
// may be garbage-collected by then).
func (c *Controller) reconcileWorkflowRun(ctx context.Context, ar *agentsv1alpha1.AgentRun) (result, error) {
	if ar.Spec.Workflow == nil || len(ar.Spec.Workflow.Steps) == 0 {
		return result{}, c.stop(ctx, ar, &problem{fail: true, reason: reasons.InvalidSpec, message: "runtime workflow needs spec.workflow.steps"})
	}
	seen := map[string]bool{}
	for _, s := range ar.Spec.Workflow.Steps {
		if seen[s.Name] {
			return result{}, c.stop(ctx, ar, &problem{fail: true, reason: reasons.InvalidSpec, message: fmt.Sprintf("workflow step %q appears twice", s.Name)})
		}
		seen[s.Name] = true
	}
	recorded := map[string]agentsv1alpha1.WorkflowStepStatus{}
	if ar.Status.Workflow != nil {
		for _, s := range ar.Status.Workflow.Steps {
			recorded[s.Name] = s
		}
	}
	// Jobs by step and attempt.
	byStep := map[string]map[int32]*batchv1.Job{}
	for _, j := range c.jobsOf(ar.Namespace, ar.Name) {
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
	started := hasStarted(ar) || len(byStep) > 0
	if started {
		c.limits.markActive(ar)
	}
	var agent *agentsv1alpha1.Agent
	var base work
	// load checks the Agent and policy once, before the first Job this reconcile creates.
	load := func() *problem {
		if agent != nil {
			return nil
		}
		a, p := c.prepare(ctx, ar)
		if p != nil {
			return p
		}
		w, p := c.baseWork(ar, a)
		if p != nil {
			return p
		}
		agent, base = a, w
		return nil
	}
	now := metav1.NewTime(c.now())
	var steps []agentsv1alpha1.WorkflowStepStatus
	var res result
	runPhase, reason, message := "", "", ""
	blocked := false // a step is in progress or failed: later steps wait
	for _, spec := range ar.Spec.Workflow.Steps {
		rec := recorded[spec.Name]
		rec.Name = spec.Name
		maxAttempts := spec.Retries + 1
		if blocked {
			if rec.Phase == "" {
				rec.Phase = agentsv1alpha1.PhasePending
			}
			steps = append(steps, rec)
			continue
		}
		if rec.Phase == agentsv1alpha1.PhaseSucceeded {
			steps = append(steps, rec)
			continue
		}
		if rec.Phase == agentsv1alpha1.PhaseFailed && rec.Attempt >= maxAttempts {
			steps, blocked = append(steps, rec), true
			runPhase, reason, message = agentsv1alpha1.PhaseFailed, ReasonStepFailed, fmt.Sprintf("step %s failed after %d attempt(s): %s", spec.Name, rec.Attempt, rec.Message)
			continue
		}
		jobs := byStep[labelValue(spec.Name)]
		var attempt int32
		for n := range jobs {
			attempt = max(attempt, n)
		}
		if attempt == 0 && rec.JobRef != nil {
			// Its Job is gone before its outcome was recorded: job-gc reports WorkflowJobMissing.
			steps, blocked = append(steps, rec), true
			continue
		}
		next := int32(0) // the attempt to start now, if any
		if attempt == 0 {
			next = 1
		} else {
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
				steps = append(steps, rec)
				continue
			case done && attempt >= maxAttempts:
				setStepPhase(&rec, agentsv1alpha1.PhaseFailed, r+": "+msg, now)
				rec.FinishedAt, rec.NextRetryAt = &now, nil
				steps, blocked = append(steps, rec), true
				runPhase, reason, message = agentsv1alpha1.PhaseFailed, ReasonStepFailed, fmt.Sprintf("step %s failed after %d attempt(s): %s", spec.Name, attempt, msg)
				continue
			case done:
				at := metav1.NewTime(failedAt(j).Add(secondsOf(spec.RetryBackoffSeconds)))
				if at.After(now.Time) {
					setStepPhase(&rec, ReasonRetrying, fmt.Sprintf("attempt %d failed (%s); attempt %d at %s", attempt, r, attempt+1, at.UTC().Format("15:04:05")), now)
					rec.NextRetryAt = &at
					res.RequeueAfter = at.Sub(now.Time)
				} else {
					next = attempt + 1
				}
			case c.podRunning(j):
				setStepPhase(&rec, agentsv1alpha1.PhaseRunning, "", now)
			default:
				setStepPhase(&rec, agentsv1alpha1.PhasePending, "Job "+j.Name+" created; waiting for its pod to run", now)
			}
		}
		if next > 0 {
			if p := load(); p != nil {
				return result{}, c.stop(ctx, ar, p)
			}
			w := base
			w.step, w.attempt, w.retries = spec.Name, next, 0
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
			if p := c.checkImage(w.image, agent); p != nil {
				return result{}, c.stop(ctx, ar, p)
			}
			j, r, p := c.startJob(ctx, ar, w, !started)
			if p != nil {
				return result{}, c.stop(ctx, ar, p)
			}
			if j == nil {
				return r, nil // queued
			}
			started = true
			rec.Attempt, rec.JobRef, rec.NextRetryAt = next, refOf(j), nil
			setStepPhase(&rec, agentsv1alpha1.PhasePending, "Job "+j.Name+" created; waiting for its pod to run", now)
		}
		steps, blocked = append(steps, rec), true
	}
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
		conds: []cond{{CondAccepted, metav1.ConditionTrue, reasons.JobCreated, "the workflow's first Job was created"}}}
	if last := lastJobRef(steps); last != nil {
		st.jobRef = last
	}
	switch runPhase {
	case agentsv1alpha1.PhaseSucceeded:
		st.conds = append(st.conds, cond{CondSucceeded, metav1.ConditionTrue, ReasonCompleted, message})
	case agentsv1alpha1.PhaseFailed:
		st.conds = append(st.conds, cond{CondSucceeded, metav1.ConditionFalse, reason, message})
	}
	return res, c.setRunStatus(ctx, ar, st)
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
