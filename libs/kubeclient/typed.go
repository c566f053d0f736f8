package kubeclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// RESTClientFor is a typed REST client for one agentplane API group (the kinds of Scheme), for
// tests that need one; services use the generated clientset (libs/api/client).
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

// DropManagedFields is an informer transform: cached objects lose metadata.managedFields, the
// server-side apply bookkeeping no controller here reads, and often the largest part of a small
// object's metadata. An update sent from such a copy leaves the server's managedFields as they
// are (an omitted field is not a reset). Anything without object metadata passes unchanged.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
