package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Handler is an informer event handler for objects of type T (a pointer type such as *batchv1.Job).
// fn sees every add, update and delete, with deleted true for a delete; a delete whose final state
// the informer missed (a tombstone, cache.DeletedFinalStateUnknown) is unwrapped to the last state
// it knew. Objects of any other type are ignored.
func Handler[T any](fn func(obj T, deleted bool)) cache.ResourceEventHandler {
	call := func(obj any, deleted bool) {
		if t, ok := Unwrap(obj).(T); ok {
			fn(t, deleted)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, false) },
		UpdateFunc: func(_, obj any) { call(obj, false) },
		DeleteFunc: func(obj any) { call(obj, true) },
	}
}

// EnqueueKey is an informer event handler that adds every object's own key to q, on add, update
// and delete (so that a reconciler also sees its object go).
func EnqueueKey(q *Queue) cache.ResourceEventHandler {
	add := func(obj any) {
		if m, ok := Unwrap(obj).(metav1.Object); ok {
			q.Add(Key(m.GetNamespace(), m.GetName()))
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }, DeleteFunc: add}
}

// EnqueueIndexed is an informer event handler for a kind that others refer to (an Agent that
// AgentRuns name): on its add or update, every object of inf listed under index at its key is
// added to q.
func EnqueueIndexed(inf cache.SharedIndexInformer, index string, q *Queue) cache.ResourceEventHandler {
	add := func(obj any) {
		m, ok := Unwrap(obj).(metav1.Object)
		if !ok {
			return
		}
		items, _ := inf.GetIndexer().ByIndex(index, Key(m.GetNamespace(), m.GetName()))
		for _, it := range items {
			if o, ok := it.(metav1.Object); ok {
				q.Add(Key(o.GetNamespace(), o.GetName()))
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
}

// Unwrap is the object a delete event carries: a tombstone's last known state, else obj itself.
func Unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// ControllerOf is the owner reference of the given kind that controls the object (nil if none).
func ControllerOf(refs []metav1.OwnerReference, kind string) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Kind == kind && refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

// IndexByController is an informer index of objects by "<namespace>/<name>" of their controlling
// owner of the given kind (Jobs by AgentRun, Pods by Job).
func IndexByController(kind string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil, nil
		}
		if ref := ControllerOf(m.GetOwnerReferences(), kind); ref != nil {
			return []string{Key(m.GetNamespace(), ref.Name)}, nil
		}
		return nil, nil
	}
}

// Get is the object at namespace/name in inf's cache, as T.
func Get[T any](inf cache.SharedIndexInformer, namespace, name string) (T, bool) {
	var zero T
	if inf == nil {
		return zero, false
	}
	obj, ok, err := inf.GetStore().GetByKey(Key(namespace, name))
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// ByIndex lists the objects of inf's cache under index at value, as T.
func ByIndex[T any](inf cache.SharedIndexInformer, index, value string) []T {
	items, _ := inf.GetIndexer().ByIndex(index, value)
	out := make([]T, 0, len(items))
	for _, it := range items {
		if t, ok := it.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
