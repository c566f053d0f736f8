package writer

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/agentplane/agentplane/libs/kubeclient"
)

// storeKey names one informer's cache: one kind in one namespace.
type storeKey struct {
	resource  schema.GroupVersionResource
	namespace string
}

// Watch keeps a copy of every object of the written kinds in namespaces, fed by one informer
// per kind and namespace (managedFields dropped), so that a write to an object there reads
// nothing from the API server: it starts from the copy the informer holds, or from the object
// as this writer last wrote it until the informer has seen that write. A copy that turns out
// stale costs one conflict and one read, as before. Objects in other namespaces are read from
// the API server on a cache miss, and so is everything until the caches have filled. Watch
// returns once ctx ends.
func (w *Writer) Watch(ctx context.Context, namespaces []string) error {
	namespaces = uniqueSorted(namespaces)
	if len(namespaces) == 0 {
		return nil
	}
	stores := map[storeKey]cache.Store{}
	var synced []cache.InformerSynced
	var factories []dynamicinformer.DynamicSharedInformerFactory
	for _, ns := range namespaces {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(w.client, 0, ns, nil)
		factories = append(factories, f)
		for _, k := range kinds {
			inf := f.ForResource(k.resource).Informer()
			utilruntime.Must(inf.SetTransform(kubeclient.DropManagedFields))
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { w.observed(k, obj) },
				UpdateFunc: func(_, obj any) { w.observed(k, obj) },
				DeleteFunc: func(obj any) { w.forget(k, obj) },
			}); err != nil {
				return fmt.Errorf("watch %s in %s: %w", k.resource.Resource, ns, err)
			}
			stores[storeKey{k.resource, ns}] = inf.GetStore()
			synced = append(synced, inf.HasSynced)
		}
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ended before the caches filled: every write read the API server meanwhile
	}
	w.mu.Lock()
	w.stores = stores
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	w.stores = nil
	w.mu.Unlock()
	return nil
}

// observed drops the writer's own copy of an object once the informer has seen the write that
// produced it: from then on the informer's copy is as new or newer. Events arrive in
// resourceVersion order, so an event older than the write never matches it.
func (w *Writer) observed(k *kind, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	key := objectKey{k.name, u.GetNamespace(), u.GetName()}
	w.mu.Lock()
	defer w.mu.Unlock()
	if last := w.last[key]; last != nil && last.GetResourceVersion() == u.GetResourceVersion() {
		delete(w.last, key)
	}
}

func (w *Writer) forget(k *kind, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		w.mu.Lock()
		delete(w.last, objectKey{k.name, u.GetNamespace(), u.GetName()})
		w.mu.Unlock()
	}
}

func uniqueSorted(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}
