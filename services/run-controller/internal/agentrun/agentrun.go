package agentrun

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilcache "k8s.io/apimachinery/pkg/util/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
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

// Reconciler reconciles AgentRuns: a job-runtime run's one Job, a workflow-runtime run's steps
// one Job at a time, each admitted against the concurrency, queue and rate limits first.
type Reconciler struct {
	*core.Core
	limits *admission
	// enqueue adds an AgentRun's key to the AgentRun queue (a freed slot wakes queued runs).
	enqueue func(key string)
	// gone remembers the Jobs of job-runtime runs deleted before their run recorded them in
	// jobRef, by namespace/Job name (JobDeleted): the start claim said Starting, the pod had not
	// run, and the jobRef waited for the jobRef delay. Without it the run's next reconcile finds
	// neither a Job nor a jobRef, takes the run for one whose Job was never created, and
	// creates a second.
	gone *utilcache.Expiring
}

// New is the AgentRun reconciler on c; enqueue adds a key to the AgentRun queue.
func New(c *core.Core, enqueue func(key string)) *Reconciler {
	r := &Reconciler{Core: c, enqueue: enqueue, gone: c.NewExpiring()}
	r.limits = newAdmission(c.Cfg.Limits, r.notStartedRuns)
	return r
}

// Seed counts the runs the caches hold against the limits; the wiring calls it once the caches
// have synced, before any reconcile.
func (c *Reconciler) Seed() { c.limits.seed(c.AllRuns()) }

// OnEvent is told of every AgentRun event: a run that ended or is gone frees its slot, and
// the oldest runs waiting for one are looked at again.
func (c *Reconciler) OnEvent(key string, ar *agentsv1alpha1.AgentRun, deleted bool) {
	if (deleted || core.IsTerminal(ar.Status.Phase)) && c.limits.release(key) {
		c.wakeQueued()
	}
}

// Active is the number of runs counted against the concurrency limits.
func (c *Reconciler) Active() int { return c.limits.activeCount() }

// Reconcile makes the AgentRun key's (namespace/name) Jobs exist and its status say what they
// did.
func (c *Reconciler) Reconcile(ctx context.Context, key string) (core.Result, error) {
	ns, name := scaffold.SplitKey(key)
	ar, ok := c.Run(ns, name)
	if !ok {
		c.limits.release(core.NsKey(ns, name))
		c.ForgetWarnings(core.NsKey(ns, name))
		if !c.Cfg.JobFinalizer {
			return core.Result{}, c.releaseHolds(ctx, ns, name, "")
		}
		return core.Result{}, nil
	}
	if !c.Cfg.JobFinalizer && (ar.DeletionTimestamp != nil || core.IsTerminal(ar.Status.Phase)) {
		if err := c.releaseHolds(ctx, ns, name, ar.UID); err != nil {
			return core.Result{}, err
		}
	}
	if ar.DeletionTimestamp != nil || core.IsTerminal(ar.Status.Phase) || ar.CancelInEffect() {
		// A cancelled run is cancel-propagator's: nothing more starts for it.
		return core.Result{}, nil
	}
	if c.parentCancelled(ar) {
		// A step of a cancelled OrchestrationRun is too, even before its own spec.cancel arrives
		// (cancel-propagator sets it while it deletes the step's Jobs): its status is what the
		// cancel writes. Looked at again in a while: a cancel refused with cancel support off
		// gives the step back, and the OrchestrationRun's own events do not queue its steps.
		return core.Result{RequeueAfter: parentCancelRecheck}, nil
	}
	switch ar.Spec.Runtime.Type {
	case agentsv1alpha1.RuntimeJob:
		return c.reconcileJobRun(ctx, ar)
	case agentsv1alpha1.RuntimeWorkflow:
		return c.reconcileWorkflowRun(ctx, ar)
	default:
		return core.Result{}, c.stop(ctx, ar, &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: fmt.Sprintf(
			"runtime %q is not run by run-controller, which runs the job and workflow runtimes", ar.Spec.Runtime.Type)})
	}
}

// prepare checks what every runtime needs before its first Job: the Agent, the labels, the
// Secrets (the policy, then that each exists).
func (c *Reconciler) prepare(ctx context.Context, ar *agentsv1alpha1.AgentRun) (*agentsv1alpha1.Agent, *core.Problem) {
	agent, ok := c.Agent(ar.Namespace, ar.Spec.AgentRef.Name)
	if !ok {
		return nil, &core.Problem{Reason: reasons.InvalidSpec, Message: fmt.Sprintf(
			"Agent %s not found in namespace %s; the run waits until it exists", ar.Spec.AgentRef.Name, ar.Namespace)}
	}
	if err := c.Cfg.Policy.CheckLabels(ar.Labels); err != nil {
		return nil, &core.Problem{Fail: true, Reason: reasons.Forbidden, Message: err.Error()}
	}
	secrets := secretsOf(ar)
	if err := c.Cfg.Policy.CheckSecrets(secrets); err != nil {
		return nil, &core.Problem{Fail: true, Reason: reasons.Forbidden, Message: err.Error()}
	}
	if err := checkReferences(c.Cfg.Policy, ar, agent); err != nil {
		return nil, &core.Problem{Fail: true, Reason: reasons.Forbidden, Message: err.Error()}
	}
	for _, s := range secrets {
		// Metadata only: the Secret's values are never read.
		_, err := c.Metadata.Resource(secretsGVR).Namespace(ar.Namespace).Get(ctx, s, metav1.GetOptions{})
		switch {
		case err == nil:
		case apierrors.IsNotFound(err):
			return nil, &core.Problem{Reason: reasons.MissingSecret, Message: fmt.Sprintf(
				"Secret %s (named by the run) not found in namespace %s; the run waits until it exists", s, ar.Namespace)}
		case apierrors.IsForbidden(err):
			return nil, &core.Problem{Reason: reasons.Forbidden, Message: fmt.Sprintf(
				"run-controller may not get Secret %s in namespace %s: grant it get on secrets there (its chart's Role does)", s, ar.Namespace)}
		default:
			return nil, &core.Problem{Reason: reasons.ReconcileError, Message: fmt.Sprintf("check Secret %s: %v", s, err)}
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
func (c *Reconciler) baseWork(ar *agentsv1alpha1.AgentRun, agent *agentsv1alpha1.Agent) (work, *core.Problem) {
	w := work{run: ar, agent: agent, params: ar.Spec.Parameters, attempt: 1}
	if ar.Spec.Workload != nil {
		w.image, w.res, w.volumes = ar.Spec.Workload.Image, ar.Spec.Workload.Resources, ar.Spec.Workload.Volumes
	}
	if w.image == "" && agent.Spec.Defaults != nil {
		w.image = agent.Spec.Defaults.Image
	}
	if w.image == "" {
		w.image = c.Cfg.AgentImage
	}
	if agent.Spec.Defaults != nil {
		w.timeout, w.retries = agent.Spec.Defaults.TimeoutSeconds, agent.Spec.Defaults.RetryLimit
	}
	if v, ok, err := runtimeInt(ar, "timeoutSeconds"); err != nil {
		return w, &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: err.Error()}
	} else if ok {
		w.timeout = v
	}
	if v, ok, err := runtimeInt(ar, "retryLimit"); err != nil {
		return w, &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: err.Error()}
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
func (c *Reconciler) checkImage(image string, agent *agentsv1alpha1.Agent) *core.Problem {
	if image == "" {
		return &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: "no image: set spec.workload.image on the run or spec.defaults.image on its Agent (run-controller has no default: JANGAR_AGENT_IMAGE, the chart's runtime.agentImage, is empty)"}
	}
	if err := c.Cfg.Policy.CheckImage(image); err != nil {
		return &core.Problem{Fail: true, Reason: reasons.Forbidden, Message: err.Error()}
	}
	if err := checkAgentImage(image, agent); err != nil {
		return &core.Problem{Fail: true, Reason: reasons.Forbidden, Message: err.Error()}
	}
	return nil
}

// reconcileJobRun runs a job-runtime run: one Job, its outcome the run's.
func (c *Reconciler) reconcileJobRun(ctx context.Context, ar *agentsv1alpha1.AgentRun) (core.Result, error) {
	job, found := c.Job(ar.Namespace, JobName(ar, "", 1))
	if !found {
		if ar.Status.JobRef != nil {
			// The Job was confirmed created and is gone: job-gc reports WorkflowJobMissing; a
			// second Job would run the agent twice.
			return core.Result{}, nil
		}
		if gone, ok := c.goneJob(ar.Namespace, JobName(ar, "", 1)); ok {
			// Created, then deleted before the run recorded it: recorded now, never replaced.
			if err := c.setRunStatus(ctx, ar, goneJobStatus(gone)); err != nil {
				return core.Result{}, err
			}
			c.gone.Delete(core.NsKey(ar.Namespace, gone.Name))
			return core.Result{}, nil
		}
		agent, p := c.prepare(ctx, ar)
		if p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		w, p := c.baseWork(ar, agent)
		if p == nil {
			p = c.checkImage(w.image, agent)
		}
		if p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		var res core.Result
		job, res, p = c.startJob(ctx, ar, w, true)
		if p != nil {
			return core.Result{}, c.stop(ctx, ar, p)
		}
		if job == nil {
			return res, nil
		}
	}
	c.limits.markActive(ar)
	st := jobRunStatus(job, c.PodRunning)
	delay := c.Cfg.JobRefDelay
	if delay <= 0 {
		delay = core.DefaultJobRefDelay
	}
	if wait := jobRefWait(ar, job, st, delay, c.Now()); wait > 0 {
		return core.Result{RequeueAfter: wait}, nil
	}
	return core.Result{}, c.setRunStatus(ctx, ar, st)
}

// jobRefWait is how long to wait before writing st over the status of a run whose start is
// already recorded: by its own start claim (Starting), or, for an OrchestrationRun's step, by the
// OrchestrationRun's (the step Pending, "starting AgentRun ...; waiting for its pod to run"). It
// is 0 when st is to be written now, as it is unless it is the Pending JobCreated status that only
// adds the jobRef, and the Job, not being deleted, is younger than delay (Config.JobRefDelay). The run's cached
// status is not what decides: the reconcile that claimed, and one woken by the Job's creation
// before the claim's own update arrived, hold the run as it was before the claim.
func jobRefWait(ar *agentsv1alpha1.AgentRun, job *batchv1.Job, st runStatus, delay time.Duration, now time.Time) time.Duration {
	if st.phase != agentsv1alpha1.PhasePending || st.reason != reasons.JobCreated || ar.Status.JobRef != nil || job.DeletionTimestamp != nil {
		// A Job being deleted is not worth waiting for a pod of: recorded now, its deletion is
		// reported (job-gc), not answered with a second Job once it is gone.
		return 0
	}
	left := delay - now.Sub(job.CreationTimestamp.Time)
	if left <= 0 {
		return 0
	}
	return min(left, delay)
}

// startingStatus is what a job-runtime run's start claim writes: admitted, its Job (named) about
// to be created.
func startingStatus(jobName string) runStatus {
	msg := "starting Job " + jobName + "; waiting for its pod to run"
	return runStatus{phase: agentsv1alpha1.PhasePending, reason: reasons.Starting, message: msg,
		conds: []core.Cond{core.C(CondAccepted, metav1.ConditionTrue, reasons.Starting, msg)}}
}

// jobRunStatus is the status a job-runtime run's Job says: Succeeded or Failed from its final
// condition, Running once a pod of it has run, else Pending.
func jobRunStatus(job *batchv1.Job, running func(*batchv1.Job) bool) runStatus {
	st := runStatus{jobRef: refOf(job), conds: []core.Cond{core.C(CondAccepted, metav1.ConditionTrue, reasons.JobCreated, "Job "+job.Name+" created")}}
	switch done, failed, reason, msg := jobOutcome(job); {
	case done && !failed:
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseSucceeded, ReasonCompleted, "Job "+job.Name+" completed"
		st.conds = append(st.conds, core.C(CondSucceeded, metav1.ConditionTrue, ReasonCompleted, st.message))
	case done:
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseFailed, reason, msg
		st.conds = append(st.conds, core.C(CondSucceeded, metav1.ConditionFalse, reason, msg))
	case running(job):
		st.phase, st.reason, st.message = agentsv1alpha1.PhaseRunning, ReasonRunning, "Job "+job.Name+" is running"
	default:
		st.phase, st.reason, st.message = agentsv1alpha1.PhasePending, reasons.JobCreated, "Job "+job.Name+" created; waiting for its pod to run"
	}
	return st
}

// startJob admits the run (first Job only) and creates the Job. It returns the Job, or nil and
// when to look again when the run waits for a slot.
func (c *Reconciler) startJob(ctx context.Context, ar *agentsv1alpha1.AgentRun, w work, first bool) (*batchv1.Job, core.Result, *core.Problem) {
	key := core.NsKey(ar.Namespace, ar.Name)
	if first {
		d := c.limits.admit(ar, c.Now())
		if d.refuse {
			return nil, core.Result{}, &core.Problem{Fail: true, Reason: d.reason, Message: d.message}
		}
		if !d.start {
			err := c.setRunStatus(ctx, ar, runStatus{
				phase: agentsv1alpha1.PhasePending, reason: d.reason, message: d.message,
				conds: []core.Cond{core.C(CondAccepted, metav1.ConditionUnknown, d.reason, d.message)},
			})
			if err != nil {
				return nil, core.Result{}, &core.Problem{Reason: reasons.ReconcileError, Message: err.Error()}
			}
			return nil, core.Result{RequeueAfter: d.retryAfter}, nil
		}
	}
	job, err := c.buildJob(w)
	if err != nil {
		c.limits.unstart(key)
		return nil, core.Result{}, &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: err.Error()}
	}
	// A start claim on the run (on its OrchestrationRun for a step's run) through status-writer:
	// refused once the cancel is in, even if the cache has not seen it, so no Job starts after
	// a cancel.
	if granted, err := c.claimStart(ctx, ar, w, job.Name); err != nil || !granted {
		c.limits.unstart(key)
		if err != nil {
			return nil, core.Result{}, &core.Problem{Reason: reasons.ReconcileError, Message: err.Error()}
		}
		return nil, core.Result{}, nil
	}
	created, err := c.Kube.BatchV1().Jobs(ar.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: core.FieldManager})
	switch {
	case err == nil:
		c.Metrics.JobsCreated.Inc()
		c.Emit(ctx, ar, "Normal", reasons.JobCreated, "CreateJob", "Created Job "+created.Name, false)
		return created, core.Result{}, nil
	case apierrors.IsAlreadyExists(err):
		// Made by an earlier reconcile (a restart, a stale cache, another replica): the same
		// deterministic name, so it is this run's Job when this run owns it.
		live, gerr := c.Kube.BatchV1().Jobs(ar.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if gerr != nil {
			return nil, core.Result{}, &core.Problem{Reason: reasons.ReconcileError, Message: fmt.Sprintf("get Job %s: %v", job.Name, gerr)}
		}
		if ref := core.ControllerOf(live.OwnerReferences, "AgentRun"); ref == nil || ref.UID != ar.UID {
			c.limits.unstart(key)
			return nil, core.Result{}, &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: fmt.Sprintf(
				"a Job named %s already exists in %s and is not this run's: delete it or rename the run", job.Name, ar.Namespace)}
		}
		return live, core.Result{}, nil
	case apierrors.IsForbidden(err):
		c.limits.unstart(key)
		return nil, core.Result{}, &core.Problem{Reason: reasons.Forbidden, Message: fmt.Sprintf("creating Job %s was refused: %s", job.Name, core.APIMessage(err))}
	case core.PolicyNotReady(err):
		// An admission policy on Jobs that kube-apiserver could not set up yet: retried.
		c.limits.unstart(key)
		return nil, core.Result{}, &core.Problem{Reason: reasons.ReconcileError, Message: fmt.Sprintf(
			"creating Job %s: an admission policy could not run yet (kube-apiserver just started?); retrying: %s", job.Name, core.APIMessage(err))}
	case apierrors.IsInvalid(err):
		c.limits.unstart(key)
		return nil, core.Result{}, &core.Problem{Fail: true, Reason: reasons.InvalidSpec, Message: fmt.Sprintf("the API server refused Job %s: %s", job.Name, core.APIMessage(err))}
	default:
		c.limits.unstart(key)
		return nil, core.Result{}, &core.Problem{Reason: reasons.ReconcileError, Message: fmt.Sprintf("create Job %s: %v", job.Name, err)}
	}
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
func (c *Reconciler) stop(ctx context.Context, ar *agentsv1alpha1.AgentRun, p *core.Problem) error {
	key := core.NsKey(ar.Namespace, ar.Name)
	if p.Reason == reasons.ReconcileError {
		c.Emit(ctx, ar, "Warning", reasons.ReconcileError, "Reconcile", p.Message, true)
		return p
	}
	c.limits.hold(key)
	st := runStatus{reason: p.Reason, message: p.Message, conds: []core.Cond{core.C(CondAccepted, metav1.ConditionFalse, p.Reason, p.Message)}}
	if p.Fail {
		st.phase = agentsv1alpha1.PhaseFailed
		st.conds = append(st.conds, core.C(CondSucceeded, metav1.ConditionFalse, p.Reason, p.Message))
	} else {
		st.phase = agentsv1alpha1.PhasePending
	}
	if c.WarnOnce(key, p.Reason+"/"+p.Message) {
		core.LogProblem(ctx, "AgentRun", key, st.phase, p.Reason, p.Message)
		c.Emit(ctx, ar, "Warning", core.EventReason(p.Reason), "Admit", p.Message, false)
	}
	if err := c.setRunStatus(ctx, ar, st); err != nil {
		return err
	}
	if !p.Fail && p.Reason != reasons.InvalidSpec {
		return scaffold.Waiting(p)
	}
	return nil
}

// runStatus is what the controller wants an AgentRun's status to say.
type runStatus struct {
	phase, reason, message string
	conds                  []core.Cond
	jobRef                 *agentsv1alpha1.JobRef
	workflow               *agentsv1alpha1.WorkflowStatus
}

// setRunStatus writes st through status-writer unless the status already says it.
func (c *Reconciler) setRunStatus(ctx context.Context, ar *agentsv1alpha1.AgentRun, st runStatus) error {
	if runStatusSays(ar, st) {
		return nil
	}
	var fields proto.Message
	if st.jobRef != nil || st.workflow != nil {
		f, err := statusclient.AgentRunFields(st.jobRef, st.workflow)
		if err != nil {
			return fmt.Errorf("encode AgentRun %s/%s status fields: %w", ar.Namespace, ar.Name, err)
		}
		fields = f
	}
	return c.WriteStatus(ctx, "AgentRun", ar.Namespace, ar.Name, string(ar.UID), ar.Generation, st.phase, st.reason, st.message, st.conds, fields)
}

// runStatusSays reports whether the run's status already says st.
func runStatusSays(ar *agentsv1alpha1.AgentRun, st runStatus) bool {
	s := ar.Status
	if s.Phase != st.phase || s.Reason != st.reason || s.Message != st.message || s.ObservedGeneration != ar.Generation {
		return false
	}
	if st.jobRef != nil && (s.JobRef == nil || *s.JobRef != *st.jobRef) {
		return false
	}
	if st.workflow != nil && !core.SameJSON(s.Workflow, st.workflow) {
		return false
	}
	return core.CondsSay(s.Conditions, st.conds)
}

// parentCancelRecheck is how long a step left alone for its OrchestrationRun's cancel waits
// before it is looked at again.
const parentCancelRecheck = 5 * time.Second

// parentCancelled reports whether the run is a step of an OrchestrationRun (the one its owner
// reference names, by UID) whose cancel is in effect, as the cache shows it.
func (c *Reconciler) parentCancelled(ar *agentsv1alpha1.AgentRun) bool {
	ref := core.ControllerOf(ar.OwnerReferences, "OrchestrationRun")
	if ref == nil {
		return false
	}
	or, ok := c.OrchRun(ar.Namespace, ref.Name)
	return ok && or.UID == ref.UID && or.CancelInEffect()
}

// claimStart claims, before a Job is created, that work starts for the run: on the run itself,
// or on the OrchestrationRun that owns it (whose cancel stops its steps). A job-runtime run's own
// claim also writes its Starting status (one write, not two).
func (c *Reconciler) claimStart(ctx context.Context, ar *agentsv1alpha1.AgentRun, w work, jobName string) (bool, error) {
	if ref := core.ControllerOf(ar.OwnerReferences, "OrchestrationRun"); ref != nil {
		return c.Claim(ctx, "OrchestrationRun", ar.Namespace, ref.Name, string(ref.UID), nil)
	}
	if w.step != "" {
		return c.Claim(ctx, "AgentRun", ar.Namespace, ar.Name, string(ar.UID), nil)
	}
	st := startingStatus(jobName)
	return c.ClaimWithStatus(ctx, "AgentRun", ar.Namespace, ar.Name, string(ar.UID), ar.Generation, st.phase, st.reason, st.message, st.conds, nil)
}
