// Package reasons is the one list of condition types and reasons in agentplane: the stable
// event reasons (Known, All: the only reasons event-emitter accepts), the status-only reasons of
// a run's phase, and the condition types the controllers set. They are stable CamelCase words:
// runbooks, alerts and `kubectl get events --field-selector reason=...` depend on them, so they
// are never renamed.
package reasons

// Condition types of the run kinds.
const (
	// CondAccepted (AgentRun): the run passed validation and admission and its Job was created
	// (True), or why not (False: InvalidSpec, MissingSecret, Forbidden, QueueFull; Unknown: Queued).
	CondAccepted = "Accepted"
	// CondSucceeded (AgentRun): set when the run finishes: True (Completed) or False (why it failed).
	CondSucceeded = "Succeeded"
	// CondReady (OrchestrationRun): True once every step succeeded, False once one failed.
	CondReady = "Ready"
	// CondJobMissing (AgentRun, job-gc): the run's Job is gone before its outcome was recorded
	// (WorkflowJobMissing), or is back (JobFound).
	CondJobMissing = "JobMissing"
	// CondCancelled (both run kinds, cancel-propagator): Unknown while a cancel runs
	// (CancelRequested), True once it is done (Cancelled, CancelTimedOut).
	CondCancelled = "Cancelled"
	// CondReconciled (both run kinds, run-controller): False (ReconcileError, the error) while
	// reconciles fail with a transient error and are retried; True (Reconciled) again after the
	// next one succeeds. Absent on a run that never had such an error (seed 001).
	CondReconciled = "Reconciled"
)

// Reasons a run's status gives for its phase that are not event reasons (they are not in All).
const (
	// Queued: the run waits for a slot or the start rate (JANGAR_AGENTS_CONTROLLER_CONCURRENCY_*, _RATE_*).
	Queued = "Queued"
	// Running: the run's (or a step's) pod runs.
	Running = "Running"
	// Completed: the run (or every step) succeeded.
	Completed = "Completed"
	// StepFailed: a workflow or orchestration step failed for good.
	StepFailed = "StepFailed"
	// Retrying: a workflow step's attempt failed; the next starts after its backoff.
	Retrying = "Retrying"
	// Reconciled: the Reconciled condition's reason once a reconcile succeeds after a
	// ReconcileError.
	Reconciled = "Reconciled"
)

// Reasons for reconcile failures an operator must fix (seed 001): emitted as Warning events.
const (
	// InvalidSpec: the object's spec cannot be acted on (a field is missing or contradictory).
	InvalidSpec = "InvalidSpec"
	// MissingSecret: a Secret the object references does not exist.
	MissingSecret = "MissingSecret"
	// Forbidden: policy or RBAC refuses what the object asks for (an image, a service account).
	Forbidden = "Forbidden"
)

// Reasons of the run lifecycle.
const (
	// WorkflowJobMissing: a run's Job vanished before its outcome was recorded (seed 002).
	WorkflowJobMissing = "WorkflowJobMissing"
	// Starting: the run was admitted and claimed its start; its Job is being created or its
	// pod has not run yet (the status says JobCreated, with the Job's jobRef, if the pod has
	// not run a few seconds after the Job was created).
	Starting = "Starting"
	// JobCreated: the run's Job is confirmed created.
	JobCreated = "JobCreated"
	// ReconcileError: a transient failure (API server, network); retried.
	ReconcileError = "ReconcileError"
	// QueueFull: a run was refused because too many runs already wait for a slot
	// (JANGAR_AGENTS_CONTROLLER_QUEUE_*).
	QueueFull = "QueueFull"
	// JobResultHeld: a finished or deleted Job has kept its job-result finalizer longer than
	// JANGAR_JOB_GC_HOLD_WARNING_SECONDS because its run has not recorded the outcome.
	JobResultHeld = "JobResultHeld"
	// JobFound: a Job reported missing is there after all (the JobMissing condition clears).
	JobFound = "JobFound"
)

// Reasons of OrchestrationRun cancellation (seed 003).
const (
	// CancelRequested: spec.cancel was set and propagation started.
	CancelRequested = "CancelRequested"
	// Cancelled: every child was terminated (or the cancel timeout passed) and the run is Cancelled.
	Cancelled = "Cancelled"
	// CancelTimedOut: JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS passed before every child stopped;
	// the run was marked Cancelled anyway.
	CancelTimedOut = "CancelTimedOut"
	// CancelIgnoredTerminal: cancel was requested on a run already Succeeded or Failed: a no-op.
	CancelIgnoredTerminal = "CancelIgnoredTerminal"
	// CancelDisabled: cancel was requested while cancel support is off
	// (JANGAR_ORCHESTRATION_CANCEL_ENABLED=false); nothing was stopped.
	CancelDisabled = "CancelDisabled"
)

var all = map[string]bool{
	InvalidSpec: true, MissingSecret: true, Forbidden: true,
	WorkflowJobMissing: true, Starting: true, JobCreated: true, ReconcileError: true, QueueFull: true, JobResultHeld: true, JobFound: true,
	CancelRequested: true, Cancelled: true, CancelTimedOut: true, CancelIgnoredTerminal: true, CancelDisabled: true,
}

// Known reports whether reason is one of the system's stable reasons.
func Known(reason string) bool { return all[reason] }

// All returns every stable reason.
func All() []string {
	out := make([]string, 0, len(all))
	for r := range all {
		out = append(out, r)
	}
	return out
}
