package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/redact"
)

// Condition types and status reasons of the run kinds (libs/reasons has them all).
const (
	CondAccepted     = reasons.CondAccepted
	CondSucceeded    = reasons.CondSucceeded
	ReasonRunning    = reasons.Running
	ReasonCompleted  = reasons.Completed
	ReasonStepFailed = reasons.StepFailed
	ReasonRetrying   = reasons.Retrying
)

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

func isTerminal(phase string) bool {
	switch phase {
	case agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed, agentsv1alpha1.PhaseCancelled:
		return true
	}
	return false
}

// problem is why a run cannot go on: it fails (a spec that will not work as written) or waits
// (for an Agent or Secret to appear, or for a permission to be granted).
type problem struct {
	reason, message string
	fail            bool
}

func (p *problem) Error() string { return p.reason + ": " + p.message }

// reconcileAgentRun makes a run's Jobs exist and its status say what they did.
func (c *Controller) reconcileAgentRun(ctx context.Context, ns, name string) (result, error) {
	ar, ok := c.run(ns, name)
	if !ok {
		c.limits.release(nsKey(ns, name))
		c.forgetWarnings(nsKey(ns, name))
		return result{}, nil
	}
	if ar.DeletionTimestamp != nil || isTerminal(ar.Status.Phase) || ar.Spec.Cancel {
		// A cancelled run is cancel-propagator's: nothing more starts for it.
		return result{}, nil
	}
	switch ar.Spec.Runtime.Type {
	case agentsv1alpha1.RuntimeJob:
		return c.reconcileJobRun(ctx, ar)
	case agentsv1alpha1.RuntimeWorkflow:
		return c.reconcileWorkflowRun(ctx, ar)
	default:
		return result{}, c.stop(ctx, ar, &problem{fail: true, reason: reasons.InvalidSpec, message: fmt.Sprintf(
			"runtime %q is not run by run-controller, which runs the job and workflow runtimes", ar.Spec.Runtime.Type)})
	}
}

// prepare checks what every runtime needs before its first Job: the Agent, the labels, the
// Secrets (the policy, then that each exists).
func (c *Controller) prepare(ctx context.Context, ar *agentsv1alpha1.AgentRun) (*agentsv1alpha1.Agent, *problem) {
	agent, ok := c.agent(ar.Namespace, ar.Spec.AgentRef.Name)
	if !ok {
		return nil, &problem{reason: reasons.InvalidSpec, message: fmt.Sprintf(
			"Agent %s not found in namespace %s; the run waits until it exists", ar.Spec.AgentRef.Name, ar.Namespace)}
	}
	if err := c.cfg.Policy.checkLabels(ar.Labels); err != nil {
		return nil, &problem{fail: true, reason: reasons.Forbidden, message: err.Error()}
	}
	secrets := secretsOf(ar)
	if err := c.cfg.Policy.checkSecrets(secrets); err != nil {
		return nil, &problem{fail: true, reason: reasons.Forbidden, message: err.Error()}
	}
	if err := c.cfg.Policy.checkReferences(ar, agent); err != nil {
		return nil, &problem{fail: true, reason: reasons.Forbidden, message: err.Error()}
	}
	for _, s := range secrets {
		// Metadata only: the Secret's values are never read.
		_, err := c.d.Metadata.Resource(secretsGVR).Namespace(ar.Namespace).Get(ctx, s, metav1.GetOptions{})
		switch {
		case err == nil:
		case apierrors.IsNotFound(err):
			return nil, &problem{reason: reasons.MissingSecret, message: fmt.Sprintf(
				"Secret %s (named by the run) not found in namespace %s; the run waits until it exists", s, ar.Namespace)}
		case apierrors.IsForbidden(err):
			return nil, &problem{reason: reasons.Forbidden, message: fmt.Sprintf(
				"run-controller may not get Secret %s in namespace %s: grant it get on secrets there (its chart's Role does)", s, ar.Namespace)}
		default:
			return nil, &problem{reason: reasons.ReconcileError, message: fmt.Sprintf("check Secret %s: %v", s, err)}
		}
	}
	return agent, nil
}

// runtimeConfig reads a whole-number setting of spec.runtime.config.
func runtimeInt(ar *agentsv1alpha1.AgentRun, key string) (int32, bool, error) {
	raw, ok := ar.Spec.Runtime.Config[key]
	if !ok {
		return 0, false, nil
	}
	var n int64
	if err := json.Unmarshal(raw.Raw, &n); err != nil || n < 0 || n > 1<<31-1 {
		var s string
		if json.Unmarshal(raw.Raw, &s) == nil {
			if v, err := strconv.ParseInt(s, 10, 32); err == nil && v >= 0 {
				return int32(v), true, nil
			}
		}
		return 0, false, fmt.Errorf("spec.runtime.config.%s: %s is not a whole number of 0 or more", key, raw.Raw)
	}
	return int32(n), true, nil
}

func runtimeString(ar *agentsv1alpha1.AgentRun, key string) string {
	var s string
	if raw, ok := ar.Spec.Runtime.Config[key]; ok {
		_ = json.Unmarshal(raw.Raw, &s)
	}
	return s
}

// baseWork is what every Job of the run shares.
func (c *Controller) baseWork(ar *agentsv1alpha1.AgentRun, agent *agentsv1alpha1.Agent) (work, *problem) {
	w := work{run: ar, agent: agent, params: ar.Spec.Parameters, attempt: 1}
	if ar.Spec.Workload != nil {
		w.image, w.res, w.volumes = ar.Spec.Workload.Image, ar.Spec.Workload.Resources, ar.Spec.Workload.Volumes
	}
	if w.image == "" && agent.Spec.Defaults != nil {
		w.image = agent.Spec.Defaults.Image
	}
	if w.image == "" {
		w.image = c.cfg.AgentImage
	}
	if agent.Spec.Defaults != nil {
		w.timeout, w.retries = agent.Spec.Defaults.TimeoutSeconds, agent.Spec.Defaults.RetryLimit
	}
	if v, ok, err := runtimeInt(ar, "timeoutSeconds"); err != nil {
		return w, &problem{fail: true, reason: reasons.InvalidSpec, message: err.Error()}
	} else if ok {
		w.timeout = v
	}
	if v, ok, err := runtimeInt(ar, "retryLimit"); err != nil {
		return w, &problem{fail: true, reason: reasons.InvalidSpec, message: err.Error()}
	} else if ok {
		w.retries = v
	}
	if ar.Spec.Implementation != nil {
		w.impl = ar.Spec.Implementation.Inline.Text
	}
	if ar.Spec.ImplementationSpecRef != nil {
		w.implRef = ar.Spec.ImplementationSpecRef.Name
	}
	// Whether the run may run as it was decided in prepare (checkReferences).
	w.sa = runtimeString(ar, "serviceAccountName")
	return w, nil
}

// checkImage refuses a run with no image, or one the policy or the run's Agent
// (spec.security.allowedImages) refuses.
func (c *Controller) checkImage(image string, agent *agentsv1alpha1.Agent) *problem {
	if image == "" {
		return &problem{fail: true, reason: reasons.InvalidSpec, message: "no image: set spec.workload.image on the run or spec.defaults.image on its Agent (run-controller has no default: JANGAR_AGENT_IMAGE, the chart's runtime.agentImage, is empty)"}
	}
	if err := c.cfg.Policy.checkImage(image); err != nil {
		return &problem{fail: true, reason: reasons.Forbidden, message: err.Error()}
	}
	if err := checkAgentImage(image, agent); err != nil {
		return &problem{fail: true, reason: reasons.Forbidden, message: err.Error()}
	}
	return nil
}

// reconcileJobRun runs a job-runtime run: one Job, its outcome the run's.
func (c *Controller) reconcileJobRun(ctx context.Context, ar *agentsv1alpha1.AgentRun) (result, error) {
	job, found := c.job(ar.Namespace, jobName(ar, "", 1))
	if !found {
		if ar.Status.JobRef != nil {
			// The Job was confirmed created and is gone: job-gc reports WorkflowJobMissing; a
			// second Job would run the agent twice.
			return result{}, nil
		}
		agent, p := c.prepare(ctx, ar)
		if p != nil {
			return result{}, c.stop(ctx, ar, p)
		}
		w, p := c.baseWork(ar, agent)
		if p == nil {
			p = c.checkImage(w.image, agent)
		}
		if p != nil {
			return result{}, c.stop(ctx, ar, p)
		}
		var res result
		job, res, p = c.startJob(ctx, ar, w, true)
		if p != nil {
			return result{}, c.stop(ctx, ar, p)
		}
		if job == nil {
			return res, nil
		}
	}
	c.limits.markActive(ar)
	return result{}, c.setRunStatus(ctx, ar, jobRunStatus(job, c.podRunning))
}

// jobRunStatus is the status a job-runtime run's Job says: Succeeded or Failed from its final
// condition, Running once a pod of it has run, else Pending.
func jobRunStatus(job *batchv1.Job, running func(*batchv1.Job) bool) runStatus {
	st := runStatus{jobRef: refOf(job), conds: []cond{{CondAccepted, metav1.ConditionTrue, reasons.JobCreated, "Job " + job.Name + " created"}}}
	switch done, failed, reason, msg := jobOutcome(job); {
	case done && !failed:
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseSucceeded, ReasonCompleted, "Job "+job.Name+" completed"
		st.conds = append(st.conds, cond{CondSucceeded, metav1.ConditionTrue, ReasonCompleted, st.message})
	case done:
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseFailed, reason, msg
		st.conds = append(st.conds, cond{CondSucceeded, metav1.ConditionFalse, reason, msg})
	case running(job):
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseRunning, ReasonRunning, "Job "+job.Name+" is running"
	default:
		st.phase, st.reason, st.message = agentsv1alpha1.PhasePending, reasons.JobCreated, "Job "+job.Name+" created; waiting for its pod to run"
	}
	return st
}

// startJob admits the run (first Job only) and creates the Job. It returns the Job, or nil and
// when to look again when the run waits for a slot.
func (c *Controller) startJob(ctx context.Context, ar *agentsv1alpha1.AgentRun, w work, first bool) (*batchv1.Job, result, *problem) {
	key := nsKey(ar.Namespace, ar.Name)
	if first {
		d := c.limits.admit(ar, c.now())
		if d.refuse {
			return nil, result{}, &problem{fail: true, reason: d.reason, message: d.message}
		}
		if !d.start {
			err := c.setRunStatus(ctx, ar, runStatus{
				phase: agentsv1alpha1.PhasePending, reason: d.reason, message: d.message,
				conds: []cond{{CondAccepted, metav1.ConditionUnknown, d.reason, d.message}},
			})
			if err != nil {
				return nil, result{}, &problem{reason: reasons.ReconcileError, message: err.Error()}
			}
			return nil, result{RequeueAfter: d.retryAfter}, nil
		}
	}
	job, err := c.buildJob(w)
	if err != nil {
		c.limits.unstart(key)
		return nil, result{}, &problem{fail: true, reason: reasons.InvalidSpec, message: err.Error()}
	}
	// A start claim on the run (on its OrchestrationRun for a step's run) through status-writer:
	// refused once the cancel is in, even if the cache has not seen it, so no Job starts after
	// a cancel.
	if granted, err := c.claimStart(ctx, ar); err != nil || !granted {
		c.limits.unstart(key)
		if err != nil {
			return nil, result{}, &problem{reason: reasons.ReconcileError, message: err.Error()}
		}
		return nil, result{}, nil
	}
	created, err := c.d.Kube.BatchV1().Jobs(ar.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: "agentplane-run-controller"})
	switch {
	case err == nil:
		c.d.Metrics.jobsCreated.Inc()
		c.emit(ctx, ar, "Normal", reasons.JobCreated, "CreateJob", "Created Job "+created.Name, false)
		return created, result{}, nil
	case apierrors.IsAlreadyExists(err):
		// Made by an earlier reconcile (a restart, a stale cache, another replica): the same
		// deterministic name, so it is this run's Job when this run owns it.
		live, gerr := c.d.Kube.BatchV1().Jobs(ar.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if gerr != nil {
			return nil, result{}, &problem{reason: reasons.ReconcileError, message: fmt.Sprintf("get Job %s: %v", job.Name, gerr)}
		}
		if ref := controllerOf(live.OwnerReferences, "AgentRun"); ref == nil || ref.UID != ar.UID {
			c.limits.unstart(key)
			return nil, result{}, &problem{fail: true, reason: reasons.InvalidSpec, message: fmt.Sprintf(
				"a Job named %s already exists in %s and is not this run's: delete it or rename the run", job.Name, ar.Namespace)}
		}
		return live, result{}, nil
	case apierrors.IsForbidden(err):
		c.limits.unstart(key)
		return nil, result{}, &problem{reason: reasons.Forbidden, message: fmt.Sprintf("creating Job %s was refused: %s", job.Name, apiMessage(err))}
	case policyNotReady(err):
		// An admission policy on Jobs that kube-apiserver could not set up yet: retried.
		c.limits.unstart(key)
		return nil, result{}, &problem{reason: reasons.ReconcileError, message: fmt.Sprintf(
			"creating Job %s: an admission policy could not run yet (kube-apiserver just started?); retrying: %s", job.Name, apiMessage(err))}
	case apierrors.IsInvalid(err):
		c.limits.unstart(key)
		return nil, result{}, &problem{fail: true, reason: reasons.InvalidSpec, message: fmt.Sprintf("the API server refused Job %s: %s", job.Name, apiMessage(err))}
	default:
		c.limits.unstart(key)
		return nil, result{}, &problem{reason: reasons.ReconcileError, message: fmt.Sprintf("create Job %s: %v", job.Name, err)}
	}
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

// jobOutcome reads a Job's final conditions.
func jobOutcome(j *batchv1.Job) (done, failed bool, reason, message string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false, ReasonCompleted, c.Message
		case batchv1.JobFailed:
			r := c.Reason
			if r == "" {
				r = "JobFailed"
			}
			m := c.Message
			if m == "" {
				m = "Job " + j.Name + " failed"
			} else {
				m = "Job " + j.Name + ": " + m
			}
			return true, true, r, m
		}
	}
	return false, false, "", ""
}

// failedAt is when a failed Job's Failed condition was set.
func failedAt(j *batchv1.Job) time.Time {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func refOf(j *batchv1.Job) *agentsv1alpha1.JobRef {
	return &agentsv1alpha1.JobRef{Name: j.Name, Namespace: j.Namespace, UID: string(j.UID)}
}

// stop records a problem: a failing one ends the run, a waiting one keeps it Pending. A wait
// for an Agent is woken by the Agent informer; waits for Secrets and permissions, and
// transient errors, are retried with the queue's backoff.
func (c *Controller) stop(ctx context.Context, ar *agentsv1alpha1.AgentRun, p *problem) error {
	key := nsKey(ar.Namespace, ar.Name)
	if p.reason == reasons.ReconcileError {
		c.emit(ctx, ar, "Warning", reasons.ReconcileError, "Reconcile", p.message, true)
		return p
	}
	c.limits.hold(key)
	st := runStatus{reason: p.reason, message: p.message, conds: []cond{{CondAccepted, metav1.ConditionFalse, p.reason, p.message}}}
	if p.fail {
		st.phase = agentsv1alpha1.PhaseFailed
		st.conds = append(st.conds, cond{CondSucceeded, metav1.ConditionFalse, p.reason, p.message})
	} else {
		st.phase = agentsv1alpha1.PhasePending
	}
	if c.warnOnce(key, p.reason+"/"+p.message) {
		logProblem(ctx, "AgentRun", key, st.phase, p.reason, p.message)
		c.emit(ctx, ar, "Warning", eventReason(p.reason), "Admit", p.message, false)
	}
	if err := c.setRunStatus(ctx, ar, st); err != nil {
		return err
	}
	if !p.fail && p.reason != reasons.InvalidSpec {
		return scaffold.Waiting(p)
	}
	return nil
}

// logProblem logs, once per distinct problem (warnOnce), why a run failed or waits: the status
// and the event say it too, but an operator reading the controller's log should not have to
// look elsewhere. The message is redacted as status-writer redacts it.
func logProblem(ctx context.Context, kind, key, phase, reason, message string) {
	verb := "waits"
	if phase == agentsv1alpha1.PhaseFailed {
		verb = "failed"
	}
	logging.FromContext(ctx).Warn(kind+" "+verb, "object", key, "phase", phase, "reason", reason, "message", redact.String(message))
}

// eventReason maps a status reason onto the stable event reasons.
func eventReason(r string) string {
	if reasons.Known(r) {
		return r
	}
	return reasons.InvalidSpec
}

func (c *Controller) warnOnce(key, what string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warned[key] == what {
		return false
	}
	c.warned[key] = what
	return true
}

func (c *Controller) forgetWarnings(key string) {
	c.mu.Lock()
	delete(c.warned, key)
	c.mu.Unlock()
}
