//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/testenv"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// cancelBenchOffset moves the benchmark's stack off the other stacks' ports.
const cancelBenchOffset = 5000

// BenchmarkCancelHundredRunningJobs cancels an OrchestrationRun whose 100 steps each run a Job
// (kwok plays the pods, each with the default 30s grace period) and measures the time from the
// cancel until the run is Cancelled and every Job and pod is gone; the baseline, in the same run,
// deletes 100 such Jobs directly with client-go and waits until they and their pods are gone.
// It reports cancel_time / direct_time (goal: at most 1.5). Both sides wait out kwok's grace
// period, so it also reports, on each side, the time until every Job and pod had its deletion
// requested (cancel_vs_direct_requested), and the time until the run was Cancelled against the
// direct deletions requested (cancelled_vs_direct_requested): the parts the grace period does
// not hide.
//
//	cd e2e && go test -tags e2e -run '^$' -bench CancelHundredRunningJobs -benchtime 1x -timeout 30m
func BenchmarkCancelHundredRunningJobs(b *testing.B) {
	const n = 100
	ctx := context.Background()
	_, cfg := localStack(b, cancelBenchOffset, 1000)
	kc := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	create := func(gvr schema.GroupVersionResource, obj map[string]any) {
		if _, err := dyn.Resource(gvr).Namespace("agents").Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	agents := schema.GroupVersionResource{Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agents"}
	orchs := schema.GroupVersionResource{Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrations"}
	orchRuns := schema.GroupVersionResource{Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"}
	create(agents, map[string]any{"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "Agent", "metadata": map[string]any{"name": "bench"},
		"spec": map[string]any{"providerRef": map[string]any{"name": "bench"}, "defaults": map[string]any{"image": "registry.example.com/agents/bench:1"}}})
	var steps []any
	for i := range n {
		steps = append(steps, map[string]any{"name": fmt.Sprintf("s%03d", i), "kind": "AgentRun", "agentRef": map[string]any{"name": "bench"}})
	}
	create(orchs, map[string]any{"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "Orchestration", "metadata": map[string]any{"name": "hundred"},
		"spec": map[string]any{"steps": steps}})
	ann := map[string]string{"agentplane.dev/simulate-duration": "600s"}
	count := func(selector string, running bool) int {
		l, err := kc.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			b.Fatal(err)
		}
		c := 0
		for _, p := range l.Items {
			if !running || (p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil) {
				c++
			}
		}
		if !running {
			jl, err := kc.BatchV1().Jobs("agents").List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				b.Fatal(err)
			}
			c += len(jl.Items)
		}
		return c
	}
	// requested reports whether every Job and pod of selector is gone or has its deletion requested.
	requested := func(selector string) bool {
		pl, err := kc.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pl.Items {
			if p.DeletionTimestamp == nil {
				return false
			}
		}
		jl, err := kc.BatchV1().Jobs("agents").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range jl.Items {
			if j.DeletionTimestamp == nil {
				return false
			}
		}
		return true
	}
	// at records, the first time it is called with done true, the time since start.
	at := func(d *time.Duration, start time.Time, done bool) bool {
		if done && *d == 0 {
			*d = time.Since(start)
		}
		return done
	}
	waitFor := func(what string, done func() bool) {
		deadline := time.Now().Add(10 * time.Minute)
		for !done() {
			if time.Now().After(deadline) {
				b.Fatalf("%s: not after 10m", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var direct, viaCancel, directRequested, cancelRequested, cancelled time.Duration
	for round := range b.N {
		// Baseline: 100 running Jobs deleted directly.
		sel := fmt.Sprintf("bench=direct-%d", round)
		testenv.Parallel(b, n, 32, func(i int) error {
			_, err := kc.BatchV1().Jobs("agents").Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("direct-%d-%03d", round, i), Labels: map[string]string{"bench": fmt.Sprintf("direct-%d", round)}},
				Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"bench": fmt.Sprintf("direct-%d", round)}, Annotations: ann},
					Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "agent", Image: "registry.example.com/agents/bench:1"}}}}},
			}, metav1.CreateOptions{})
			return err
		})
		waitFor("direct pods Running", func() bool { return count(sel, true) >= n })
		start := time.Now()
		l, err := kc.BatchV1().Jobs("agents").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			b.Fatal(err)
		}
		testenv.Parallel(b, len(l.Items), 32, func(i int) error {
			return kc.BatchV1().Jobs("agents").Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		})
		var req time.Duration
		waitFor("direct Jobs and pods gone", func() bool {
			at(&req, start, requested(sel))
			return count(sel, false) == 0
		})
		direct += time.Since(start)
		directRequested += req

		// The same through a cancel.
		name := fmt.Sprintf("cancel-bench-%d", round)
		sel = "orchestration.proompteng.ai/run=" + name
		create(orchRuns, map[string]any{"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "OrchestrationRun",
			"metadata": map[string]any{"name": name, "annotations": map[string]any{"agentplane.dev/simulate-duration": "600s"}},
			"spec":     map[string]any{"orchestrationRef": map[string]any{"name": "hundred"}}})
		waitFor("the run's pods Running", func() bool { return count(sel, true) >= n })
		start = time.Now()
		if _, err := dyn.Resource(orchRuns).Namespace("agents").Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		var creq, done time.Duration
		waitFor("the run Cancelled, its Jobs and pods gone", func() bool {
			u, err := dyn.Resource(orchRuns).Namespace("agents").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			at(&creq, start, requested(sel))
			return at(&done, start, phase == "Cancelled") && count(sel, false) == 0
		})
		viaCancel += time.Since(start)
		cancelRequested += creq
		cancelled += done
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(direct.Seconds()/float64(b.N), "direct_s")
	b.ReportMetric(viaCancel.Seconds()/float64(b.N), "cancel_s")
	b.ReportMetric(viaCancel.Seconds()/direct.Seconds(), "cancel_vs_direct")
	// Deletion requested for every Job and pod (before kwok's grace period runs out), each side.
	b.ReportMetric(directRequested.Seconds()/float64(b.N), "direct_requested_s")
	b.ReportMetric(cancelRequested.Seconds()/float64(b.N), "cancel_requested_s")
	b.ReportMetric(cancelRequested.Seconds()/directRequested.Seconds(), "cancel_vs_direct_requested")
	// The run Cancelled, against the direct deletions all requested.
	b.ReportMetric(cancelled.Seconds()/float64(b.N), "cancelled_s")
	b.ReportMetric(cancelled.Seconds()/directRequested.Seconds(), "cancelled_vs_direct_requested")
	testenv.Goal(b, "cancel_vs_direct<=1.5", viaCancel.Seconds()/direct.Seconds() <= 1.5)
	b.Logf("100 running Jobs: deleted directly %s, through a cancel %s (%.2f times as long; goal <= 1.5)",
		(direct / time.Duration(b.N)).Round(time.Millisecond), (viaCancel / time.Duration(b.N)).Round(time.Millisecond), viaCancel.Seconds()/direct.Seconds())
}
