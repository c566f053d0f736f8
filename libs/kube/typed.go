package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// RESTClientFor is a typed REST client for one agentplane API group (the kinds of Scheme):
// informers list and watch through it, and controllers create objects with it.
func RESTClientFor(base *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(base)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("REST client for %s: %w", gv, err)
	}
	return rc, nil
}

// NewInformer watches one resource of one namespace into typed objects of the example's type.
func NewInformer(rc *rest.RESTClient, resource, namespace string, example runtime.Object, indexers cache.Indexers) cache.SharedIndexInformer {
	lw := cache.NewListWatchFromClient(rc, resource, namespace, fields.Everything())
	return cache.NewSharedIndexInformer(lw, example, 0, indexers)
}
