package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NameRef names an object in the same namespace.
type NameRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Orchestration is a reusable graph of steps; each step names an Agent (or a tool or another
// orchestration) and the steps it depends on.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=orch,categories=agentplane
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Entrypoint",type=string,JSONPath=`.spec.entrypoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Orchestration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OrchestrationSpec   `json:"spec"`
	Status OrchestrationStatus `json:"status,omitempty"`
}

// OrchestrationSpec is the graph of steps.
type OrchestrationSpec struct {
	// +optional
	Entrypoint string `json:"entrypoint,omitempty"`
	// +kubebuilder:validation:MinItems=1
	Steps []OrchestrationStep `json:"steps"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Policies map[string]apiextensionsv1.JSON `json:"policies,omitempty"`
}

// OrchestrationStep is one node of the graph.
type OrchestrationStep struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Kind says what the step runs, for example AgentRun.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +optional
	DependsOn []string `json:"dependsOn,omitempty"`
	// +optional
	AgentRef *NameRef `json:"agentRef,omitempty"`
	// +optional
	ToolRef *NameRef `json:"toolRef,omitempty"`
	// +optional
	OrchestrationRef *NameRef `json:"orchestrationRef,omitempty"`
	// +optional
	PolicyRef string `json:"policyRef,omitempty"`
	// +optional
	With map[string]string `json:"with,omitempty"`
}

// OrchestrationStatus is the observed state of an Orchestration, written only by status-writer.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.observedGeneration) || (has(self.observedGeneration) && self.observedGeneration >= oldSelf.observedGeneration)",message="status.observedGeneration cannot go backwards"
type OrchestrationStatus struct {
	// +optional
	Phase string `json:"phase,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	UpdatedAt *metav1.MicroTime `json:"updatedAt,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OrchestrationList is a list of Orchestrations.
//
// +kubebuilder:object:root=true
type OrchestrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Orchestration `json:"items"`
}

// OrchestrationRun is one run of an Orchestration. Setting spec.cancel to true asks the
// cancel-propagator to stop it.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=orchrun;or,categories=agentplane
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Orchestration",type=string,JSONPath=`.spec.orchestrationRef.name`
// +kubebuilder:printcolumn:name="Cancel",type=boolean,JSONPath=`.spec.cancel`,priority=1
// +kubebuilder:printcolumn:name="Start",type=date,JSONPath=`.status.startedAt`
// +kubebuilder:printcolumn:name="Completion",type=date,JSONPath=`.status.finishedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OrchestrationRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OrchestrationRunSpec   `json:"spec"`
	Status OrchestrationRunStatus `json:"status,omitempty"`
}

// OrchestrationRunSpec is what to run and whether to stop it. Once the run is created only
// spec.cancel may change (to true).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="spec.cancel cannot be set back to false: a cancel cannot be undone"
// +kubebuilder:validation:XValidation:rule="self == oldSelf || (has(self.parameters) == has(oldSelf.parameters) && has(self.deliveryId) == has(oldSelf.deliveryId) && has(self.ttlSecondsAfterFinished) == has(oldSelf.ttlSecondsAfterFinished) && has(self.retryOf) == has(oldSelf.retryOf))",messageExpression="'spec.' + (has(self.parameters) != has(oldSelf.parameters) ? 'parameters' : has(self.deliveryId) != has(oldSelf.deliveryId) ? 'deliveryId' : has(self.ttlSecondsAfterFinished) != has(oldSelf.ttlSecondsAfterFinished) ? 'ttlSecondsAfterFinished' : 'retryOf') + ' cannot change once the run is created (only spec.cancel can): create a new run'"
type OrchestrationRunSpec struct {
	// The spec is frozen as AgentRunSpec's is: each field's own rule refuses a new value, the
	// spec's second rule a field added or removed.

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.orchestrationRef cannot change once the run is created (only spec.cancel can): create a new run"
	OrchestrationRef NameRef `json:"orchestrationRef"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.parameters cannot change once the run is created (only spec.cancel can): create a new run"
	Parameters map[string]string `json:"parameters,omitempty"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.deliveryId cannot change once the run is created (only spec.cancel can): create a new run"
	DeliveryID string `json:"deliveryId,omitempty"`
	// Cancel asks for the run and everything it started to be stopped (cancel-propagator). A run
	// already finished keeps its phase. Once true it cannot be set back.
	// +optional
	Cancel bool `json:"cancel,omitempty"`
	// TTLSecondsAfterFinished is how long a finished OrchestrationRun is kept before it is deleted,
	// with its step AgentRuns and their Jobs (job-gc; its default is
	// JANGAR_AGENTS_CONTROLLER_ORCHESTRATIONRUN_RETENTION_SECONDS).
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.ttlSecondsAfterFinished cannot change once the run is created (only spec.cancel can): create a new run"
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// RetryOf names a finished OrchestrationRun of the same namespace and Orchestration that this
	// run retries (agentctl retry): each step that succeeded there is recorded Succeeded here,
	// pointing at that step's AgentRun, and does not run again; the other steps run. run-controller
	// fails the run (InvalidSpec) if the named run is of another Orchestration, has not finished, or
	// does not exist when this one starts.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.retryOf cannot change once the run is created (only spec.cancel can): create a new run"
	RetryOf string `json:"retryOf,omitempty"`
}

// OrchestrationRunStatus is the observed state of an OrchestrationRun, written only by
// status-writer.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.startedAt) || (has(self.startedAt) && self.startedAt == oldSelf.startedAt)",message="status.startedAt is immutable once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.finishedAt) || (has(self.finishedAt) && self.finishedAt == oldSelf.finishedAt)",message="status.finishedAt is immutable once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.observedGeneration) || (has(self.observedGeneration) && self.observedGeneration >= oldSelf.observedGeneration)",message="status.observedGeneration cannot go backwards"
type OrchestrationRunStatus struct {
	// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Cancelled
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	RunID string `json:"runId,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// +optional
	UpdatedAt *metav1.MicroTime `json:"updatedAt,omitempty"`
	// +optional
	StepStatuses []StepStatus `json:"stepStatuses,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// StepStatus is the progress of one step of an OrchestrationRun.
type StepStatus struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// +optional
	ResourceRef *ResourceRef `json:"resourceRef,omitempty"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Outputs map[string]apiextensionsv1.JSON `json:"outputs,omitempty"`
}

// ResourceRef identifies the object a step created.
type ResourceRef struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	UID string `json:"uid,omitempty"`
}

// OrchestrationRunList is a list of OrchestrationRuns.
//
// +kubebuilder:object:root=true
type OrchestrationRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OrchestrationRun `json:"items"`
}
