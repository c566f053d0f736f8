package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kube"
)

func restClientFor(base *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	return kube.RESTClientFor(base, gv)
}

func newInformer(rc *rest.RESTClient, resource, namespace string, example runtime.Object, indexers cache.Indexers) cache.SharedIndexInformer {
	return kube.NewInformer(rc, resource, namespace, example, indexers)
}

var (
	agentsGV = agentsv1alpha1.GroupVersion
	orchGV   = orchv1alpha1.GroupVersion
)
