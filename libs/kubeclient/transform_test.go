package kubeclient

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestDropManagedFields(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}}
	out, err := DropManagedFields(p)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.ManagedFields != nil || got.Name != "p" || got.Labels["a"] != "b" {
		t.Fatalf("transformed pod %+v: want it without managedFields and otherwise whole", got.ObjectMeta)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: p}
	if out, err := DropManagedFields(tomb); err != nil || out.(cache.DeletedFinalStateUnknown).Key != "ns/p" {
		t.Fatalf("a tombstone: %v, %v; want it passed through", out, err)
	}
}
