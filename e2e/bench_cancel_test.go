//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
// (kwok plays the pods) and measures the time from the cancel until the run is Cancelled and every
// Job and pod is gone; the baseline, in the same run, deletes 100 such Jobs directly with client-go
// and waits until they and their pods are gone. Each side also records when every Job and pod had
// its deletion requested, and the cancel when the run was Cancelled. Both are measured twice per
// round: with pods of the default 30 s grace period, which kwok waits out on both sides (so the
// whole-time ratio, cancel_vs_direct, is near 1 by construction), and with pods of grace period 0
// (the Agent's spec.defaults.terminationGracePeriodSeconds; grace0_ figures), where the deletions
// themselves are the time. Goals: the run Cancelled within 1.2 times the direct deletions'
// requests (cancelled_vs_direct_requested), and with grace period 0 the whole cancel within 1.2
// times the whole direct deletion (grace0_cancel_vs_direct). With AGENTPLANE_BENCH_PROFILES=DIR
// it writes CPU and allocation profiles of cancel-propagator, status-writer, event-emitter,
// job-gc, run-controller and kube-apiserver over the grace-0 cancels (from the cancel until the
// run is Cancelled and its Jobs and pods are gone, in profileWindow windows, so a little after
// too) into DIR/round<n>/, with their top frames beside them (<process>-top.txt for CPU,
// <process>-alloc-top.txt for bytes allocated).
//
//	cd e2e && go test -tags e2e -run '^$' -bench CancelHundredRunningJobs -benchtime 1x -timeout 30m
func BenchmarkCancelHundredRunningJobs(b *testing.B) {
	const n = 100
	ctx := context.Background()
	profiles := os.Getenv("AGENTPLANE_BENCH_PROFILES")
	env := []string{"AGENTPLANE_ARCHIVE=0"} // the charts' default: no run archive
	if profiles != "" {
		env = append(env, "JANGAR_DEBUG_PPROF=true")
	}
	_, cfg := localStack(b, cancelBenchOffset, 1000, env...)
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
	// The same with pods that stop at once: an Agent whose runs' pods have a grace period of 0.
	create(agents, map[string]any{"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "Agent", "metadata": map[string]any{"name": "bench-grace0"},
		"spec": map[string]any{"providerRef": map[string]any{"name": "bench"}, "defaults": map[string]any{"image": "registry.example.com/agents/bench:1",
			"terminationGracePeriodSeconds": int64(0)}}})
	var fastSteps []any
	for i := range n {
		fastSteps = append(fastSteps, map[string]any{"name": fmt.Sprintf("s%03d", i), "kind": "AgentRun", "agentRef": map[string]any{"name": "bench-grace0"}})
	}
	create(orchs, map[string]any{"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "Orchestration", "metadata": map[string]any{"name": "hundred-grace0"},
		"spec": map[string]any{"steps": fastSteps}})
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
	// pair measures one round of both sides with pods of the given grace period (nil: Kubernetes'
	// default, 30 s): 100 running Jobs deleted directly, then an OrchestrationRun of the
	// Orchestration orch (whose Agent gives its pods that grace period) cancelled.
	pair := func(round int, variant, orch string, grace *int64) cancelTimes {
		t := cancelTimes{requests: map[string]float64{}}
		sel := fmt.Sprintf("bench=direct-%s%d", variant, round)
		label := strings.TrimPrefix(sel, "bench=")
		testenv.Parallel(b, n, 32, func(i int) error {
			_, err := kc.BatchV1().Jobs("agents").Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("direct-%s%d-%03d", variant, round, i), Labels: map[string]string{"bench": label}},
				Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"bench": label}, Annotations: ann},
					Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: grace,
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
		waitFor("direct Jobs and pods gone", func() bool {
			at(&t.directRequested, start, requested(sel))
			return count(sel, false) == 0
		})
		t.direct = time.Since(start)

		// The same through a cancel.
		name := fmt.Sprintf("cancel-bench-%s%d", variant, round)
		sel = "orchestration.proompteng.ai/run=" + name
		create(orchRuns, map[string]any{"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "OrchestrationRun",
			"metadata": map[string]any{"name": name, "annotations": map[string]any{"agentplane.dev/simulate-duration": "600s"}},
			"spec":     map[string]any{"orchestrationRef": map[string]any{"name": orch}}})
		waitFor("the run's pods Running", func() bool { return count(sel, true) >= n })
		before := cancelRequests(b)
		var prof *profiler
		if profiles != "" && grace != nil {
			svc := metricsAddrs(cancelBenchOffset, "cancel-propagator", "status-writer", "event-emitter", "job-gc", "run-controller")
			prof = startProfiles(b, filepath.Join(profiles, fmt.Sprintf("round%d", round)), svc, kc) //nolint:contextcheck // each profile window has its own deadline, as in the run-controller benchmark
		}
		start = time.Now()
		if _, err := dyn.Resource(orchRuns).Namespace("agents").Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		waitFor("the run Cancelled, its Jobs and pods gone", func() bool {
			u, err := dyn.Resource(orchRuns).Namespace("agents").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			at(&t.cancelRequested, start, requested(sel))
			return at(&t.cancelled, start, phase == "Cancelled") && count(sel, false) == 0
		})
		t.viaCancel = time.Since(start)
		if prof != nil {
			// The top frames go to DIR only: a benchmark's log is cut after a few lines, and the
			// results this benchmark logs come after.
			_ = prof.stop(b, 25) //nolint:contextcheck // the allocation profiles at the end have their own deadline, as the windows do
			b.Logf("CPU and allocation profiles over the grace-0 cancel of round %d: %s (<process>-top.txt, <process>-alloc-top.txt: top frames)", round, prof.dir)
		}
		after := cancelRequests(b)
		for k, v := range after {
			t.requests[k] += v - before[k]
		}
		return t
	}
	def, fast := cancelTimes{requests: map[string]float64{}}, cancelTimes{requests: map[string]float64{}}
	for round := range b.N {
		def.add(pair(round, "", "hundred", nil))
		fast.add(pair(round, "g0-", "hundred-grace0", ptr.To[int64](0)))
	}
	b.ReportMetric(0, "ns/op")
	def.report(b, "", b.N)
	fast.report(b, "grace0_", b.N)
	// The goals: the run Cancelled within 1.2 times the direct deletions, each side until every
	// Job and pod has had its deletion requested (what kwok's grace period does not hide), and,
	// with a grace period of 0, the whole cancel (the run Cancelled, every Job and pod gone)
	// within 1.2 times the direct deletions' whole time.
	testenv.Goal(b, "cancelled_vs_direct_requested<=1.2", def.cancelled.Seconds()/def.directRequested.Seconds() <= 1.2)
	testenv.Goal(b, "grace0_cancel_vs_direct<=1.2", fast.viaCancel.Seconds()/fast.direct.Seconds() <= 1.2)
	b.Logf("100 running Jobs, pods with a 30 s grace period: deleted directly %s (deletions requested %s), through a cancel %s (Cancelled %s, deletions requested %s); "+
		"Cancelled / direct deletions requested %.2f (goal <= 1.2)",
		perRound(def.direct, b.N), perRound(def.directRequested, b.N), perRound(def.viaCancel, b.N), perRound(def.cancelled, b.N), perRound(def.cancelRequested, b.N),
		def.cancelled.Seconds()/def.directRequested.Seconds())
	b.Logf("the same with a grace period of 0: deleted directly %s, through a cancel %s (Cancelled %s); cancel / direct %.2f (goal <= 1.2)",
		perRound(fast.direct, b.N), perRound(fast.viaCancel, b.N), perRound(fast.cancelled, b.N), fast.viaCancel.Seconds()/fast.direct.Seconds())
}

// cancelTimes are one side pair's times, summed over rounds: the direct deletions until every
// Job and pod was gone and until each had its deletion requested, and the cancel until the run
// was Cancelled with its Jobs and pods gone, until each had its deletion requested, and until
// the run was Cancelled.
type cancelTimes struct {
	direct, directRequested, viaCancel, cancelRequested, cancelled time.Duration
	// requests are what the cancel cost, by cancelRequests' names.
	requests map[string]float64
}

// cancelRequests reads what a cancel costs from the services' metrics: cancel-propagator's API
// requests ("api", all verbs), and the API writes status-writer ("status") and event-emitter
// ("events") made (for every service; only the cancel runs meanwhile).
func cancelRequests(b *testing.B) map[string]float64 {
	m := map[string]float64{}
	num := func(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
	scrape := func(svc, key string, line *regexp.Regexp) {
		out, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts[svc][1]+cancelBenchOffset))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(out, "\n") {
			if s := line.FindStringSubmatch(l); s != nil {
				m[key] += num(s[1])
			}
		}
	}
	scrape("cancel-propagator", "api", restRequestLine)
	for verb, line := range restRequestsByVerb {
		scrape("cancel-propagator", "api_"+verb, line)
	}
	scrape("status-writer", "status", statusAnyLine)
	scrape("event-emitter", "events", eventsAnyLine)
	return m
}

var (
	restRequestLine    = regexp.MustCompile(`^rest_client_requests_total\{[^}]*\} ([0-9.e+]+)$`)
	restRequestsByVerb = map[string]*regexp.Regexp{}
	statusAnyLine      = regexp.MustCompile(`^agentplane_status_api_writes_total\{[^}]*\} ([0-9.e+]+)$`)
	eventsAnyLine      = regexp.MustCompile(`^agentplane_events_api_writes_total\{[^}]*\} ([0-9.e+]+)$`)
)

func init() {
	for _, verb := range []string{"GET", "PATCH", "DELETE"} {
		restRequestsByVerb[verb] = regexp.MustCompile(`^rest_client_requests_total\{[^}]*method="` + verb + `"[^}]*\} ([0-9.e+]+)$`)
	}
}

func (t *cancelTimes) add(o cancelTimes) {
	t.direct += o.direct
	t.directRequested += o.directRequested
	t.viaCancel += o.viaCancel
	t.cancelRequested += o.cancelRequested
	t.cancelled += o.cancelled
	for k, v := range o.requests {
		t.requests[k] += v
	}
}

// perRound is d, a sum over rounds, for one round.
func perRound(d time.Duration, rounds int) time.Duration {
	return (d / time.Duration(max(rounds, 1))).Round(time.Millisecond)
}

func (t *cancelTimes) report(b *testing.B, prefix string, rounds int) {
	r := float64(max(rounds, 1))
	b.ReportMetric(t.direct.Seconds()/r, prefix+"direct_s")
	b.ReportMetric(t.viaCancel.Seconds()/r, prefix+"cancel_s")
	b.ReportMetric(t.viaCancel.Seconds()/t.direct.Seconds(), prefix+"cancel_vs_direct")
	// Deletion requested for every Job and pod (before kwok's grace period runs out), each side.
	b.ReportMetric(t.directRequested.Seconds()/r, prefix+"direct_requested_s")
	b.ReportMetric(t.cancelRequested.Seconds()/r, prefix+"cancel_requested_s")
	b.ReportMetric(t.cancelRequested.Seconds()/t.directRequested.Seconds(), prefix+"cancel_vs_direct_requested")
	// The run Cancelled, against the direct deletions all requested.
	b.ReportMetric(t.cancelled.Seconds()/r, prefix+"cancelled_s")
	b.ReportMetric(t.cancelled.Seconds()/t.directRequested.Seconds(), prefix+"cancelled_vs_direct_requested")
	// What the cancel cost per step (one Job and pod each): cancel-propagator's API requests, and
	// the status and event writes made for it.
	for _, k := range []string{"api", "status", "events"} {
		b.ReportMetric(t.requests[k]/r/100, prefix+"cancel_"+k+"/step")
	}
	b.Logf("%scancel-propagator's API requests per step by verb: GET (lists) %.2f, PATCH %.2f, DELETE %.2f", prefix,
		t.requests["api_GET"]/r/100, t.requests["api_PATCH"]/r/100, t.requests["api_DELETE"]/r/100)
}
