// Package v1alpha1 holds the orchestration.proompteng.ai/v1alpha1 API: Orchestration (steps
// with dependsOn) and OrchestrationRun (one run of it, cancellable with spec.cancel).
//
// +kubebuilder:object:generate=true
// +groupName=orchestration.proompteng.ai
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the kinds in this package.
var GroupVersion = schema.GroupVersion{Group: "orchestration.proompteng.ai", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&Orchestration{}, &OrchestrationList{},
		&OrchestrationRun{}, &OrchestrationRunList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

// SchemeGroupVersion is GroupVersion under the name the generated clients use.
var SchemeGroupVersion = GroupVersion

// Resource is the group-qualified resource of this package's group (for the generated listers'
// NotFound errors).
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}
