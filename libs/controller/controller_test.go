package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// calls records the keys a reconciler was called with.
type calls struct {
	mu   sync.Mutex
	keys []string
}

// add records a call with k and returns how many there have been.
func (c *calls) add(k string) int {
	c.mu.Lock()
	c.keys = append(c.keys, k)
	c.mu.Unlock()
	return c.count(k)
}

func (c *calls) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, x := range c.keys {
		if x == k {
			n++
		}
	}
	return n
}

// start runs c until the test ends.
func start(t *testing.T, c *Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of its context ending")
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAPanickingReconcileIsRetriedAndTheOtherKeysStillReconciled(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := New(Options{Service: "toy-panics", Registry: reg, Workers: 1})
	var seen calls
	q := c.AddQueue("Toy", func(_ context.Context, key string) (Result, error) {
		if seen.add(key) == 1 && key == "ns/bad" {
			panic("nil map in the reconciler")
		}
		return Result{}, nil
	})
	start(t, c)
	q.Add("ns/bad")
	q.Add("ns/good")
	waitFor(t, "ns/bad reconciled again after its panic, and ns/good reconciled", func() bool {
		return seen.count("ns/bad") >= 2 && seen.count("ns/good") == 1
	})
	m := c.metrics
	if got := testutil.ToFloat64(m.panics.WithLabelValues("Toy")); got != 1 {
		t.Errorf("reconcile_panics_total{kind=Toy} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.errors.WithLabelValues("Toy")); got != 1 {
		t.Errorf("reconcile_errors_total{kind=Toy} = %v, want 1 (the panic)", got)
	}
}

func TestAWaitIsRetriedWithBackoffButNotCountedAsAnError(t *testing.T) {
	c := New(Options{Service: "toy-waits", Workers: 1})
	var seen calls
	q := c.AddQueue("Toy", func(_ context.Context, key string) (Result, error) {
		if seen.add(key) < 3 {
			return Result{}, Waiting(errors.New("a slot"))
		}
		return Result{}, nil
	})
	start(t, c)
	q.Add("ns/a")
	waitFor(t, "three reconciles of ns/a", func() bool { return seen.count("ns/a") == 3 })
	if got := testutil.ToFloat64(c.metrics.errors.WithLabelValues("Toy")); got != 0 {
		t.Errorf("reconcile_errors_total{kind=Toy} = %v after two waits, want 0", got)
	}
	if !IsWaiting(Waiting(errors.New("x"))) || IsWaiting(errors.New("x")) || IsWaiting(nil) {
		t.Error("IsWaiting does not tell a wait from an error")
	}
}

func TestAFailureIsRetriedWithBackoffAndCounted(t *testing.T) {
	c := New(Options{Service: "toy-fails", Workers: 1})
	var seen calls
	q := c.AddQueue("Toy", func(_ context.Context, key string) (Result, error) {
		if seen.add(key) < 3 {
			return Result{}, errors.New("the API server went away")
		}
		return Result{}, nil
	})
	start(t, c)
	q.Add("ns/a")
	waitFor(t, "three reconciles of ns/a", func() bool { return seen.count("ns/a") == 3 })
	if got := testutil.ToFloat64(c.metrics.errors.WithLabelValues("Toy")); got != 2 {
		t.Errorf("reconcile_errors_total{kind=Toy} = %v, want 2", got)
	}
}

func TestRequeueAfterReconcilesAgainWithoutAnEvent(t *testing.T) {
	c := New(Options{Service: "toy-requeue", Workers: 1})
	var seen calls
	q := c.AddQueue("Toy", func(_ context.Context, key string) (Result, error) {
		if seen.add(key) == 1 {
			return Result{RequeueAfter: 20 * time.Millisecond}, nil
		}
		return Result{}, nil
	})
	start(t, c)
	q.Add("ns/a")
	waitFor(t, "a second reconcile of ns/a", func() bool { return seen.count("ns/a") == 2 })
	time.Sleep(100 * time.Millisecond)
	if n := seen.count("ns/a"); n != 2 {
		t.Errorf("ns/a reconciled %d times; a zero Result must not requeue", n)
	}
}

func TestObserveSeesEachReconcileByKindAndKey(t *testing.T) {
	var mu sync.Mutex
	var started, ended []string
	c := New(Options{Service: "toy-observe", Workers: 1, Observe: func(key string) func() {
		mu.Lock()
		started = append(started, key)
		mu.Unlock()
		return func() { mu.Lock(); ended = append(ended, key); mu.Unlock() }
	}})
	q := c.AddQueue("Toy", func(context.Context, string) (Result, error) { return Result{}, nil })
	start(t, c)
	q.Add("ns/a")
	waitFor(t, "the reconcile observed to its end", func() bool { mu.Lock(); defer mu.Unlock(); return len(ended) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if started[0] != "Toy/ns/a" || ended[0] != "Toy/ns/a" {
		t.Errorf("observed %v / %v, want Toy/ns/a", started, ended)
	}
}

func TestHandlerUnwrapsATombstoneAndIgnoresOtherTypes(t *testing.T) {
	type event struct {
		name    string
		deleted bool
	}
	var got []event
	h := Handler(func(cm *corev1.ConfigMap, deleted bool) { got = append(got, event{cm.Name, deleted}) })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	h.OnAdd(cm, false)
	h.OnUpdate(cm, cm)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: cm})
	h.OnAdd(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}, false)
	want := []event{{"a", false}, {"a", false}, {"a", true}}
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestEnqueueKeyAddsTheObjectsKeyAlsoOnADeleteMissedByTheWatch(t *testing.T) {
	c := New(Options{Service: "toy-enqueue"})
	q := c.AddQueue("Toy", func(context.Context, string) (Result, error) { return Result{}, nil })
	h := EnqueueKey(q)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}})
	if q.Len() != 1 {
		t.Fatalf("queue holds %d keys, want 1", q.Len())
	}
	if k, _ := q.Get(); k != "ns/a" {
		t.Errorf("queued %q, want ns/a", k)
	}
}

func TestMetricsAreNamedForTheServiceAndClientGoQueuesAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := New(Options{Service: "toy-metrics", Registry: reg, Workers: 1})
	var seen calls
	q := c.AddQueue("Toy", func(_ context.Context, key string) (Result, error) { seen.add(key); return Result{}, nil })
	start(t, c)
	q.Add("ns/a")
	waitFor(t, "ns/a reconciled", func() bool { return seen.count("ns/a") == 1 })
	// A second controller on its own registry: registering client-go's collectors again is fine.
	New(Options{Service: "toy-metrics-2", Registry: prometheus.NewRegistry()})

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetName() == "workqueue_adds_total" {
			found := false
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" && l.GetValue() == "toy-metrics.toy" && m.GetCounter().GetValue() >= 1 {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("workqueue_adds_total has no count for queue toy-metrics.toy")
			}
		}
	}
	for _, want := range []string{
		"agentplane_toy_metrics_reconcile_duration_seconds", "agentplane_toy_metrics_reconcile_errors_total",
		"agentplane_toy_metrics_reconcile_panics_total", "agentplane_toy_metrics_queue_depth",
		"workqueue_adds_total", "workqueue_depth", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds",
	} {
		if !names[want] {
			var have []string
			for n := range names {
				have = append(have, n)
			}
			t.Errorf("metric %s not gathered; have %s", want, strings.Join(have, ", "))
		}
	}
}

func TestSplitKeyAndKeyRoundTrip(t *testing.T) {
	for _, tc := range []struct{ key, ns, name string }{{"ns/a", "ns", "a"}, {"a", "", "a"}} {
		ns, name := SplitKey(tc.key)
		if ns != tc.ns || name != tc.name || Key(ns, name) != tc.key {
			t.Errorf("SplitKey(%q) = %q, %q; Key of it %q", tc.key, ns, name, Key(ns, name))
		}
	}
}
