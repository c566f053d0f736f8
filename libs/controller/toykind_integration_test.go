//go:build integration

package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"

	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/testenv"
)

// The recipe of docs/adding-a-kind.md, followed for a toy kind: a Greeting whose status.reply
// the controller keeps equal to "hello, <spec.name>". A real kube-apiserver serves its CRD.
var greetings = schema.GroupVersionResource{Group: "toy.agentplane.test", Version: "v1", Resource: "greetings"}

const greetingCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "greetings.toy.agentplane.test"},
  "spec": {
    "group": "toy.agentplane.test", "scope": "Namespaced",
    "names": {"plural": "greetings", "singular": "greeting", "kind": "Greeting", "listKind": "GreetingList"},
    "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"name": {"type": "string"}}},
        "status": {"type": "object", "properties": {"reply": {"type": "string"}}}}}}}]
  }
}`

// greeter is the toy kind's reconciler: step 3 of the recipe.
type greeter struct {
	inf interface {
		GetByKey(string) (any, bool, error)
	}
	client dynamic.Interface
}

func (g *greeter) Reconcile(ctx context.Context, key string) (controller.Result, error) {
	obj, ok, err := g.inf.GetByKey(key)
	if err != nil || !ok {
		return controller.Result{}, err // gone: nothing to do
	}
	u := obj.(*unstructured.Unstructured)
	name, _, _ := unstructured.NestedString(u.Object, "spec", "name")
	want := "hello, " + name
	if got, _, _ := unstructured.NestedString(u.Object, "status", "reply"); got == want {
		return controller.Result{}, nil
	}
	u = u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, want, "status", "reply"); err != nil {
		return controller.Result{}, err
	}
	_, err = g.client.Resource(greetings).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return controller.Result{}, controller.Waiting(err) // a newer copy is on its way to the cache
	}
	return controller.Result{}, err
}

func TestAToyKindRegisteredThroughTheScaffoldIsReconciled(t *testing.T) {
	env, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := crd.UnmarshalJSON([]byte(greetingCRD)); err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the Greeting kind served", func() error {
		_, err := dyn.Resource(greetings).Namespace("default").List(ctx, metav1.ListOptions{})
		return err
	})

	// Steps 1-2: an informer for the kind, a queue for it, its events enqueue the object's key.
	reg := prometheus.NewRegistry()
	ctl := controller.New(controller.Options{Service: "toy-greeter", Registry: reg, Workers: 2})
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "default", nil)
	inf := factory.ForResource(greetings).Informer()
	g := &greeter{inf: inf.GetStore(), client: dyn}
	q := ctl.AddQueue("Greeting", g.Reconcile)
	ctl.Watch(inf, controller.EnqueueKey(q))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctl.Run(runCtx, nil) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	create := func(name, who string) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "toy.agentplane.test/v1", "kind": "Greeting",
			"metadata": map[string]any{"name": name, "namespace": "default"},
			"spec":     map[string]any{"name": who},
		}}
		if _, err := dyn.Resource(greetings).Namespace("default").Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	replied := func(name, want string) {
		testenv.Eventually(t, 30*time.Second, name+" replied "+want, func() error {
			u, err := dyn.Resource(greetings).Namespace("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got, _, _ := unstructured.NestedString(u.Object, "status", "reply"); got != want {
				return fmt.Errorf("status.reply %q", got)
			}
			return nil
		})
	}
	create("first", "ada")
	create("second", "grace")
	replied("first", "hello, ada")
	replied("second", "hello, grace")

	// A change of the spec is an event: the reply follows it.
	u, err := dyn.Resource(greetings).Namespace("default").Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "alan", "spec", "name"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(greetings).Namespace("default").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	replied("first", "hello, alan")

	// The kind has the scaffold's metrics without writing any.
	if n := testutil.CollectAndCount(reg, "agentplane_toy_greeter_reconcile_duration_seconds"); n != 1 {
		t.Errorf("agentplane_toy_greeter_reconcile_duration_seconds has %d series, want 1 (kind Greeting)", n)
	}
}
