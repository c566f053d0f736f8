package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phases an AgentRun moves through. Succeeded, Failed and Cancelled are terminal.
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
	PhaseCancelled = "Cancelled"
)

// Runtime types an AgentRun can ask for.
const (
	RuntimeWorkflow = "workflow"
	RuntimeJob      = "job"
	RuntimeTemporal = "temporal"
	RuntimeCustom   = "custom"
)

// LocalRef names an object in the same namespace.
type LocalRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Agent is the definition of an agent: which provider runs it, with what configuration and
// defaults. AgentRuns refer to it by name.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=agt,categories=agentplane
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Agent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AgentSpec   `json:"spec"`
	Status AgentStatus `json:"status,omitempty"`
}

// AgentSpec is the desired definition of an Agent.
type AgentSpec struct {
	ProviderRef LocalRef `json:"providerRef"`
	// Config is provider-specific and passed through unchanged.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Config map[string]apiextensionsv1.JSON `json:"config,omitempty"`
	// +optional
	Env []AgentEnvVar `json:"env,omitempty"`
	// +optional
	Security *AgentSecurity `json:"security,omitempty"`
	// +optional
	MemoryRef *LocalRef `json:"memoryRef,omitempty"`
	// +optional
	VcsRef *LocalRef `json:"vcsRef,omitempty"`
	// +optional
	Defaults *AgentRunDefaults `json:"defaults,omitempty"`
}

// AgentEnvVar is one environment variable given to every run of the agent.
type AgentEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// AgentSecurity says what the agent's runs may use. A run may name a Secret (ServiceAccount) that
// its creator may not get (use) only if the Agent lists it here; whoever lists one must be allowed
// it (the agentplane-agent-references admission policy). When allowedSecrets is not empty, runs
// may use only the Secrets it names.
type AgentSecurity struct {
	// +optional
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`
	// +optional
	AllowedSecrets []string `json:"allowedSecrets,omitempty"`
	// AllowedImages pins the images the agent's runs may name (spec.workload.image and their
	// workflow steps'): an image name, or a prefix ending in * ("registry.example.com/agents/*").
	// Empty: any image run-controller's own policy allows.
	// +optional
	AllowedImages []string `json:"allowedImages,omitempty"`
}

// AgentRunDefaults apply to every AgentRun of the agent unless the run overrides them.
type AgentRunDefaults struct {
	// Image runs the agent when a run names none in spec.workload.image.
	// +optional
	Image string `json:"image,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	RetryLimit int32 `json:"retryLimit,omitempty"`
	// NodeSelector is the node selector of every run's pods: where the agent's runs may run.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are added to every run's pods, e.g. to run on tainted nodes kept for agents
	// (or, on `make cluster-up`, on the simulated kwok node).
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// TerminationGracePeriodSeconds is how long every run's pods get to stop after a cancel or a
	// deletion before they are killed (the pods' terminationGracePeriodSeconds); unset means
	// Kubernetes' default (30 seconds), 0 kills them at once.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// AgentStatus is the observed state of an Agent, written only by status-writer.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.observedGeneration) || (has(self.observedGeneration) && self.observedGeneration >= oldSelf.observedGeneration)",message="status.observedGeneration cannot go backwards"
type AgentStatus struct {
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	UpdatedAt *metav1.MicroTime `json:"updatedAt,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// AgentList is a list of Agents.
//
// +kubebuilder:object:root=true
type AgentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Agent `json:"items"`
}

// AgentRun is one run of an Agent. The run-controller turns it into Kubernetes Jobs.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ar;agr,categories=agentplane
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agentRef.name`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime.type`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Start",type=date,JSONPath=`.status.startedAt`
// +kubebuilder:printcolumn:name="Completion",type=date,JSONPath=`.status.finishedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AgentRunSpec   `json:"spec"`
	Status AgentRunStatus `json:"status,omitempty"`
}

// AgentRunSpec is what to run. Once the run is created only spec.cancel may change (to true):
// what a run uses was checked for its creator when it was admitted.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be set back to false: a cancel cannot be undone"
// +kubebuilder:validation:XValidation:rule="self == oldSelf || (has(self.implementationSpecRef) == has(oldSelf.implementationSpecRef) && has(self.implementation) == has(oldSelf.implementation) && has(self.workflow) == has(oldSelf.workflow) && has(self.workload) == has(oldSelf.workload) && has(self.parameters) == has(oldSelf.parameters) && has(self.secrets) == has(oldSelf.secrets) && has(self.memoryRef) == has(oldSelf.memoryRef) && has(self.vcsRef) == has(oldSelf.vcsRef) && has(self.vcsPolicy) == has(oldSelf.vcsPolicy) && has(self.idempotencyKey) == has(oldSelf.idempotencyKey) && has(self.ttlSecondsAfterFinished) == has(oldSelf.ttlSecondsAfterFinished) && has(self.retryOf) == has(oldSelf.retryOf))",messageExpression="'spec.' + (has(self.implementationSpecRef) != has(oldSelf.implementationSpecRef) ? 'implementationSpecRef' : has(self.implementation) != has(oldSelf.implementation) ? 'implementation' : has(self.workflow) != has(oldSelf.workflow) ? 'workflow' : has(self.workload) != has(oldSelf.workload) ? 'workload' : has(self.parameters) != has(oldSelf.parameters) ? 'parameters' : has(self.secrets) != has(oldSelf.secrets) ? 'secrets' : has(self.memoryRef) != has(oldSelf.memoryRef) ? 'memoryRef' : has(self.vcsRef) != has(oldSelf.vcsRef) ? 'vcsRef' : has(self.vcsPolicy) != has(oldSelf.vcsPolicy) ? 'vcsPolicy' : has(self.idempotencyKey) != has(oldSelf.idempotencyKey) ? 'idempotencyKey' : has(self.ttlSecondsAfterFinished) != has(oldSelf.ttlSecondsAfterFinished) ? 'ttlSecondsAfterFinished' : 'retryOf') + ' cannot change once the run is created (only spec.cancel can): create a new run'"
type AgentRunSpec struct {
	// How the spec is frozen: each field's own rule (self == oldSelf) refuses a new value; the spec's
	// second rule refuses a field added or removed, and its first term (the spec unchanged, as on
	// every status write) decides that with one comparison. kube-apiserver evaluates every rule of
	// the object on each write, status writes included, and one spec rule per field, each looking
	// into the spec, cost every status write more (BenchmarkSpecRules and
	// BenchmarkSpecRulesOnTheAPIServer in libs/api measure both; docs/benchmarks.md has the figures).

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.agentRef cannot change once the run is created (only spec.cancel can): create a new run"
	AgentRef LocalRef `json:"agentRef"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.implementationSpecRef cannot change once the run is created (only spec.cancel can): create a new run"
	ImplementationSpecRef *LocalRef `json:"implementationSpecRef,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.implementation cannot change once the run is created (only spec.cancel can): create a new run"
	Implementation *InlineImplementation `json:"implementation,omitempty"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.runtime cannot change once the run is created (only spec.cancel can): create a new run"
	Runtime RuntimeSpec `json:"runtime"`
	// Workflow lists the steps of a run whose runtime is "workflow"; they run one Job at a time.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workflow cannot change once the run is created (only spec.cancel can): create a new run"
	Workflow *WorkflowSpec `json:"workflow,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workload cannot change once the run is created (only spec.cancel can): create a new run"
	Workload *WorkloadSpec `json:"workload,omitempty"`
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.parameters cannot change once the run is created (only spec.cancel can): create a new run"
	Parameters map[string]string `json:"parameters,omitempty"`
	// Secrets names the Secrets in the run's namespace that the run may read.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.secrets cannot change once the run is created (only spec.cancel can): create a new run"
	Secrets []string `json:"secrets,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.memoryRef cannot change once the run is created (only spec.cancel can): create a new run"
	MemoryRef *LocalRef `json:"memoryRef,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.vcsRef cannot change once the run is created (only spec.cancel can): create a new run"
	VcsRef *LocalRef `json:"vcsRef,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.vcsPolicy cannot change once the run is created (only spec.cancel can): create a new run"
	VcsPolicy *VcsPolicy `json:"vcsPolicy,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.idempotencyKey cannot change once the run is created (only spec.cancel can): create a new run"
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// TTLSecondsAfterFinished is how long a finished AgentRun is kept before it is deleted.
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.ttlSecondsAfterFinished cannot change once the run is created (only spec.cancel can): create a new run"
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// Cancel asks for the run and its Jobs to be stopped (cancel-propagator). A run already
	// finished keeps its phase. Once true it cannot be set back.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
	// RetryOf names the finished AgentRun of the same namespace that this run retries (agentctl
	// retry). It is a record of where the run came from: the run runs as any other.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.retryOf cannot change once the run is created (only spec.cancel can): create a new run"
	RetryOf string `json:"retryOf,omitempty"`
}

// InlineImplementation carries an implementation in the run itself.
type InlineImplementation struct {
	Inline ImplementationSpecFields `json:"inline"`
}

// ImplementationSpecFields describes the work an agent is asked to do.
type ImplementationSpecFields struct {
	// +kubebuilder:validation:MaxLength=131072
	Text string `json:"text"`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Summary string `json:"summary,omitempty"`
	// +kubebuilder:validation:MaxLength=131072
	// +optional
	Description string `json:"description,omitempty"`
	// +kubebuilder:validation:MaxItems=50
	// +optional
	AcceptanceCriteria []string `json:"acceptanceCriteria,omitempty"`
	// +optional
	Labels []string `json:"labels,omitempty"`
}

// RuntimeSpec chooses how the run is executed.
type RuntimeSpec struct {
	// +kubebuilder:validation:Enum=workflow;job;temporal;custom
	Type string `json:"type"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Config map[string]apiextensionsv1.JSON `json:"config,omitempty"`
}

// WorkflowSpec is the ordered list of steps of a workflow run.
type WorkflowSpec struct {
	// +kubebuilder:validation:MinItems=1
	Steps []WorkflowStep `json:"steps"`
}

// WorkflowStep is one step of a workflow run; it becomes one Job.
type WorkflowStep struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +optional
	ImplementationSpecRef *LocalRef `json:"implementationSpecRef,omitempty"`
	// +optional
	Implementation *InlineImplementation `json:"implementation,omitempty"`
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`
	// +optional
	Workload *WorkloadSpec `json:"workload,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Retries int32 `json:"retries,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	RetryBackoffSeconds int32 `json:"retryBackoffSeconds,omitempty"`
	// TimeoutSeconds bounds one attempt of the step (the Job's activeDeadlineSeconds); 0 means
	// the Agent's default.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// WorkloadSpec is the container a run's Jobs execute.
type WorkloadSpec struct {
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	Resources *WorkloadResources `json:"resources,omitempty"`
	// +optional
	Volumes []WorkloadVolume `json:"volumes,omitempty"`
}

// WorkloadResources are the container's requests and limits, as Kubernetes quantities.
type WorkloadResources struct {
	// +optional
	Requests map[string]string `json:"requests,omitempty"`
	// +optional
	Limits map[string]string `json:"limits,omitempty"`
}

// WorkloadVolume is one volume mounted into the run's container.
type WorkloadVolume struct {
	// +kubebuilder:validation:Enum=emptyDir;pvc;secret
	Type      string `json:"type"`
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// +optional
	SizeLimit string `json:"sizeLimit,omitempty"`
	// +optional
	Medium string `json:"medium,omitempty"`
}

// VcsPolicy says whether and how the run may use version control.
type VcsPolicy struct {
	// +optional
	Required bool `json:"required,omitempty"`
	// +kubebuilder:validation:Enum=read-write;read-only;none
	// +optional
	Mode string `json:"mode,omitempty"`
}

// AgentRunStatus is the observed state of an AgentRun, written only by status-writer. The API
// server itself refuses to change or remove startedAt and finishedAt once they are set.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.startedAt) || (has(self.startedAt) && self.startedAt == oldSelf.startedAt)",message="status.startedAt is immutable once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.finishedAt) || (has(self.finishedAt) && self.finishedAt == oldSelf.finishedAt)",message="status.finishedAt is immutable once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.observedGeneration) || (has(self.observedGeneration) && self.observedGeneration >= oldSelf.observedGeneration)",message="status.observedGeneration cannot go backwards"
type AgentRunStatus struct {
	// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Cancelled
	// +optional
	Phase string `json:"phase,omitempty"`
	// Reason is a CamelCase word for why the run is in its phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// RuntimeRef points at what executes the run (for the job runtime: the Job).
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	RuntimeRef map[string]apiextensionsv1.JSON `json:"runtimeRef,omitempty"`
	// JobRef is the Job of a job-runtime run once it is confirmed created.
	// +optional
	JobRef *JobRef `json:"jobRef,omitempty"`
	// +optional
	Workflow *WorkflowStatus `json:"workflow,omitempty"`
	// StartedAt is set on the first transition into Running.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is set on the first transition into a terminal phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// UpdatedAt moves on every status write.
	// +optional
	UpdatedAt *metav1.MicroTime `json:"updatedAt,omitempty"`
	// +optional
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the metadata.generation the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// WorkflowStatus is the progress of a workflow run's steps.
type WorkflowStatus struct {
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Steps []WorkflowStepStatus `json:"steps,omitempty"`
}

// WorkflowStepStatus is the progress of one workflow step.
type WorkflowStepStatus struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	NextRetryAt *metav1.Time `json:"nextRetryAt,omitempty"`
	// +optional
	JobRef *JobRef `json:"jobRef,omitempty"`
}

// JobRef identifies a Kubernetes Job.
type JobRef struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	UID string `json:"uid,omitempty"`
}

// Artifact is an output a run produced.
type Artifact struct {
	Name string `json:"name"`
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	Key string `json:"key,omitempty"`
	// +optional
	URL string `json:"url,omitempty"`
}

// AgentRunList is a list of AgentRuns.
//
// +kubebuilder:object:root=true
type AgentRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRun `json:"items"`
}
