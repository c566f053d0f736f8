package v1alpha1

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Labels, annotations and the finalizer that run-controller puts on what it creates. job-gc and
// cancel-propagator find a run's Jobs and an OrchestrationRun's AgentRuns by them.
const (
	// LabelAgentRun names the AgentRun a Job (and its pods) runs.
	LabelAgentRun = "agents.proompteng.ai/agent-run"
	// LabelAgent names the Agent of the run.
	LabelAgent = "agents.proompteng.ai/agent"
	// LabelWorkflowStep names the workflow step a Job runs.
	LabelWorkflowStep = "agents.proompteng.ai/workflow-step"
	// LabelAttempt is the attempt number of a workflow step's Job, from 1.
	LabelAttempt = "agents.proompteng.ai/attempt"
	// LabelOrchestrationRun names the OrchestrationRun an AgentRun (and its Jobs) belongs to.
	LabelOrchestrationRun = "orchestration.proompteng.ai/run"
	// LabelOrchestrationStep names the Orchestration step an AgentRun runs.
	LabelOrchestrationStep = "orchestration.proompteng.ai/step"
	// LabelManagedBy is app.kubernetes.io/managed-by; run-controller's Jobs and pods carry
	// ManagedByRunController in it, and its informers watch only those.
	LabelManagedBy         = "app.kubernetes.io/managed-by"
	ManagedByRunController = "agentplane-run-controller"

	// FinalizerJobResult keeps a run's Job readable until job-gc has seen its outcome recorded
	// in the AgentRun's status.
	FinalizerJobResult = "agents.proompteng.ai/job-result"
	// FinalizerArchive keeps a run (AgentRun or OrchestrationRun) until job-gc has written it to
	// the run archive, while archiving is on; job-gc releases it when archiving is off.
	FinalizerArchive = "agents.proompteng.ai/archive"

	// AnnotationSimulatePrefix: annotations of a run (or of the OrchestrationRun it came from)
	// that start with it are copied onto the Job's pod template, where the local control
	// plane's kwok Stages read them, and the example agent (examples/agent) on a real node reads
	// them through the downward API: agentplane.dev/simulate-duration ("600s") and
	// agentplane.dev/simulate-exit-code ("1").
	// The API server's record of who created an AgentRun and which of the objects it names that
	// user was allowed, written at admission by the agentplane-run-creator policy
	// (charts/agentplane-crds), always overwriting what the request carried, and unchangeable
	// afterwards (agentplane-run-records). Comma-separated names. run-controller trusts only these.
	AnnotationCreatedBy               = "agents.proompteng.ai/created-by"
	AnnotationCreatorMayGetSecrets    = "agents.proompteng.ai/creator-may-get-secrets"
	AnnotationCreatorMayGetClaims     = "agents.proompteng.ai/creator-may-get-persistentvolumeclaims"
	AnnotationCreatorMayUseServiceAcc = "agents.proompteng.ai/creator-may-use-serviceaccounts"
	// VerbDelegate on agentruns marks who creates runs on others' behalf (run-controller, for an
	// OrchestrationRun's steps): the admission policies' user checks do not apply to it.
	VerbDelegate = "delegate"

	// AnnotationResubmitOf, on an AgentRun or an OrchestrationRun, names the run of the same
	// namespace it is a copy of (agentctl resubmit: the whole run again). A retry records where it
	// came from in spec.retryOf instead, which run-controller acts on.
	AnnotationResubmitOf = "agents.proompteng.ai/resubmit-of"

	AnnotationSimulatePrefix   = "agentplane.dev/simulate-"
	AnnotationSimulateDuration = AnnotationSimulatePrefix + "duration"
	AnnotationSimulateExitCode = AnnotationSimulatePrefix + "exit-code"
)

// LabelValue is how run-controller writes a name into the labels above: the name itself when it
// is a valid label value (at most 63 characters), else cut to 54 and given a hash of the whole,
// so a selector on the label finds exactly that name's objects.
func LabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(name[:54], "-._"), h.Sum32())
}
