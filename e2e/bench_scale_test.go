//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agentplane/agentplane/libs/testenv"
)

// scaleOffset keeps this benchmark's stack off the others' ports.
const scaleOffset = 4000

var (
	orchRunsGVR = schema.GroupVersionResource{Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"}
	orchGVR     = schema.GroupVersionResource{Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrations"}
)

// scaleTiers are the sizes BenchmarkScaleRuns applies, one after the other on one stack
// (AGENTPLANE_BENCH_SCALE_TIERS, comma-separated; default 1000,10000).
func scaleTiers() []int {
	v := os.Getenv("AGENTPLANE_BENCH_SCALE_TIERS")
	if v == "" {
		return []int{1000, 10000}
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n >= 10 {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkScaleRuns is issue 16's item 2: on the local control plane (kwok plays the pods, which
// succeed 1-5 s after they are Ready), each tier applies N AgentRuns and N/10 OrchestrationRuns
// of 5 steps (a, then b and c, then d, then e: 5 more AgentRuns each) at once, and waits until
// run-controller's cache counts every AgentRun Succeeded (the drain), then until the namespace
// holds no Job and no pod (the cleanup: the TTL-after-finished controller deletes each finished
// Job once job-gc has released its job-result hold, and the garbage collector its pod). Then,
// through the API: every AgentRun and OrchestrationRun Succeeded, and run-controller created
// exactly one Job per AgentRun (its jobs_created_total). Per tier it reports the time to drain
// and to clean up, and over the whole tier (start to cleanup) the API server's requests per
// AgentRun (reads: get, list, watch; writes: the rest; from its own apiserver_request_total,
// minus this benchmark's own requests), run-controller's and job-gc's peak resident memory
// (sampled every second) and CPU seconds (from /proc), and status-writer's and event-emitter's
// gRPC requests per second. Cost per run must not grow with the number of runs: the last tier's
// requests and CPU per run are compared with the first's.
//
// Each tier has a baseline, measured on the same stack just before it (plainJobs): the same
// number of runs as plain Jobs with ttlSecondsAfterFinished 0, created at once until every Job
// and pod is gone, with the API server's requests per Job counted the same way. Reported per
// tier: the whole-life throughput through agentplane as a fraction of the plain Jobs'
// (throughput_vs_plain, goal >= 0.9 at the largest tier) and its API requests per run over
// theirs (api_req_vs_plain, goal <= 1.3).
//
// With AGENTPLANE_BENCH_PROFILES=DIR each tier also writes CPU and allocation profiles, as text
// top frames (the profiler of bench_cpu_test.go): kube-apiserver's over the plain Jobs
// (DIR/tN/plain), and kube-apiserver's and agentplane's services' over the runs through
// agentplane (DIR/tN/agentplane); profiling costs each side a little CPU, so a profiled run's
// figures are not the benchmark's.
//
// Every tier counts a run's whole life, its Job's deletion included: the stack runs with a Job
// TTL of AGENTPLANE_BENCH_SCALE_JOB_TTL seconds (JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS; default 0,
// a Job goes as soon as its result is recorded). With the default 600 s TTL a tier that drains in
// less than 600 s counts no Job deletion and a longer tier counts most of them, which made the
// second tier's requests per run look grown (docs/benchmarks-history.md, "Second run").
//
//	cd e2e && go test -tags e2e -count=1 -run '^$' -bench ScaleRuns -benchtime 1x -timeout 150m .
func BenchmarkScaleRuns(b *testing.B) {
	tiers := scaleTiers()
	ctx := context.Background()
	jobTTL := "0"
	if v := os.Getenv("AGENTPLANE_BENCH_SCALE_JOB_TTL"); v != "" {
		jobTTL = v
	}
	// The charts' default, no run archive (BenchmarkArchiveTenThousandRuns measures it).
	stackEnv := []string{"JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS=" + jobTTL, "AGENTPLANE_ARCHIVE=0"}
	profiles := os.Getenv("AGENTPLANE_BENCH_PROFILES")
	if profiles != "" {
		stackEnv = append(stackEnv, "JANGAR_DEBUG_PPROF=true")
	}
	dir, cfg := localStack(b, scaleOffset, 2000, stackEnv...)
	// This benchmark's own API requests (creates, the final lists, reading /metrics), subtracted
	// from the server's counts.
	var ownReads, ownWrites atomic.Int64
	cfg = testenv.CountRequests(cfg, &ownReads, func(r *http.Request) bool { return r.Method == http.MethodGet })
	cfg = testenv.CountRequests(cfg, &ownWrites, func(r *http.Request) bool { return r.Method != http.MethodGet })
	kc := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	const ns = "agents"
	create := func(gvr schema.GroupVersionResource, obj map[string]any) error {
		_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		return err
	}
	if err := create(schema.GroupVersionResource{Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agents"}, map[string]any{
		"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "Agent", "metadata": map[string]any{"name": "bench"},
		"spec": map[string]any{"providerRef": map[string]any{"name": "bench"}, "defaults": map[string]any{"image": "registry.example.com/agents/bench:1"}},
	}); err != nil {
		b.Fatal(err)
	}
	step := func(name string, deps ...string) map[string]any {
		s := map[string]any{"name": name, "kind": "AgentRun", "agentRef": map[string]any{"name": "bench"}}
		if len(deps) > 0 {
			s["dependsOn"] = deps
		}
		return s
	}
	if err := create(orchGVR, map[string]any{
		"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "Orchestration", "metadata": map[string]any{"name": "five"},
		"spec": map[string]any{"entrypoint": "a", "steps": []any{step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c"), step("e", "d")}},
	}); err != nil {
		b.Fatal(err)
	}
	pids := map[string]int{}
	// CPU and memory of agentplane's two controllers, and CPU of the cluster's own parts, to show
	// which one bounds the drain.
	for _, svc := range []string{"run-controller", "job-gc", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok"} {
		raw, err := os.ReadFile(filepath.Join(dir, "run", svc+".pid"))
		if err != nil {
			b.Fatal(err)
		}
		if pids[svc], err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil {
			b.Fatal(err)
		}
	}

	// left counts the Jobs and pods in the namespace.
	left := func() (jobs, pods int64) { return jobsAndPods(b, kc, ns, "") }

	type tierResult struct {
		n, runs                int
		drain, done            time.Duration
		reads, writes          float64 // per AgentRun
		cpu                    map[string]float64
		peakRSS                map[string]float64
		statusRate, eventsRate float64
	}
	var results []tierResult
	succeeded := 0 // AgentRuns Succeeded before this tier
	b.ResetTimer()
	for _, n := range tiers {
		orchs := n / 10
		total := n + orchs*5
		name := fmt.Sprintf("t%d", n)
		var prof *profiler
		if profiles != "" {
			prof = startProfiles(b, filepath.Join(profiles, name, "plain"), nil, kc) //nolint:contextcheck // each profile window has its own deadline
		}
		plain := plainJobs(b, kc, name, total, ownReads.Load, ownWrites.Load)
		if prof != nil {
			_ = prof.stop(b, 30) //nolint:contextcheck // the allocation profiles at the end have their own deadline
			svc := metricsAddrs(scaleOffset, "run-controller", "status-writer", "event-emitter", "job-gc")
			prof = startProfiles(b, filepath.Join(profiles, name, "agentplane"), svc, kc) //nolint:contextcheck // as above
		}
		before := scrapeScale(b, kc, pids)
		reads0, writes0 := ownReads.Load(), ownWrites.Load()
		stop := make(chan struct{})
		peaks := samplePeaks(pids, stop)
		start := time.Now()
		testenv.Parallel(b, n+orchs, 32, func(i int) error {
			if i < n {
				return create(agentRunsGVR, map[string]any{
					"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "AgentRun",
					"metadata": map[string]any{"name": fmt.Sprintf("%s-run-%05d", name, i)},
					"spec":     map[string]any{"agentRef": map[string]any{"name": "bench"}, "runtime": map[string]any{"type": "job"}},
				})
			}
			return create(orchRunsGVR, map[string]any{
				"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "OrchestrationRun",
				"metadata": map[string]any{"name": fmt.Sprintf("%s-orch-%04d", name, i-n)},
				"spec":     map[string]any{"orchestrationRef": map[string]any{"name": "five"}},
			})
		})
		deadline := start.Add(75 * time.Minute)
		for {
			m := scrapeScale(b, kc, nil)
			if int(m["runs_succeeded"])-succeeded >= total {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("tier %d: %d of %d AgentRuns Succeeded after 75m", n, int(m["runs_succeeded"])-succeeded, total)
			}
			time.Sleep(2 * time.Second)
		}
		drain := time.Since(start)
		for {
			jobs, pods := left()
			if jobs == 0 && pods == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("tier %d: %d Jobs and %d pods still in the namespace %s after the drain (Job TTL %ss)", n, jobs, pods, time.Since(start)-drain, jobTTL)
			}
			time.Sleep(2 * time.Second)
		}
		done := time.Since(start)
		if prof != nil {
			_ = prof.stop(b, 30) //nolint:contextcheck // as above
			b.Logf("tier %d: profiles of both sides in %s", n, filepath.Join(profiles, name))
		}
		close(stop)
		peak := <-peaks
		after := scrapeScale(b, kc, pids)
		ownR, ownW := float64(ownReads.Load()-reads0), float64(ownWrites.Load()-writes0)
		succeeded += total

		// Checked through the API, once the drain is measured.
		phases := func(gvr schema.GroupVersionResource, prefix string) (int, int) {
			l, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				b.Fatal(err)
			}
			all, ok := 0, 0
			for _, it := range l.Items {
				if !strings.HasPrefix(it.GetName(), prefix) {
					continue
				}
				all++
				if p, _, _ := unstructured.NestedString(it.Object, "status", "phase"); p == "Succeeded" {
					ok++
				}
			}
			return all, ok
		}
		if all, ok := phases(agentRunsGVR, name+"-"); all != total || ok != total {
			b.Errorf("tier %d: %d of %d AgentRuns exist, %d Succeeded", n, all, total, ok)
		}
		if all, ok := phases(orchRunsGVR, name+"-"); all != orchs || ok != orchs {
			b.Errorf("tier %d: %d of %d OrchestrationRuns exist, %d Succeeded", n, all, orchs, ok)
		}
		if jobs := after["jobs_created"] - before["jobs_created"]; int(jobs) != total {
			b.Errorf("tier %d: run-controller created %d Jobs for %d AgentRuns, want exactly one each", n, int(jobs), total)
		}
		r := tierResult{n: n, runs: total, drain: drain, done: done, cpu: map[string]float64{}, peakRSS: peak,
			reads:  (after["api_reads"] - before["api_reads"] - ownR) / float64(total),
			writes: (after["api_writes"] - before["api_writes"] - ownW) / float64(total),
		}
		for svc := range pids {
			r.cpu[svc] = after["cpu_"+svc] - before["cpu_"+svc]
		}
		r.statusRate = (after["grpc_status-writer"] - before["grpc_status-writer"]) / done.Seconds()
		r.eventsRate = (after["grpc_event-emitter"] - before["grpc_event-emitter"]) / done.Seconds()
		results = append(results, r)
		b.Logf("tier %d: %d AgentRuns (%d OrchestrationRuns) drained in %s (%.1f runs/s), Jobs and pods gone after %s (Job TTL %ss); "+
			"over the tier, API requests per run: %.2f reads, %.2f writes "+
			"(this benchmark's own %d excluded); run-controller: %.1f CPU s (%.2f ms/run), peak RSS %.0f MiB; job-gc: %.1f CPU s, peak RSS %.0f MiB; "+
			"status-writer %.1f req/s, event-emitter %.1f req/s",
			n, total, orchs, drain.Round(time.Second), float64(total)/drain.Seconds(), done.Round(time.Second), jobTTL, r.reads, r.writes, int64(ownR+ownW),
			r.cpu["run-controller"], 1000*r.cpu["run-controller"]/float64(total), peak["run-controller"]/(1<<20),
			r.cpu["job-gc"], peak["job-gc"]/(1<<20), r.statusRate, r.eventsRate)
		var busy []string
		for _, svc := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "run-controller", "job-gc"} {
			busy = append(busy, fmt.Sprintf("%s %.0f%%", svc, 100*r.cpu[svc]/done.Seconds()))
		}
		b.Logf("tier %d: CPU over the tier, in %% of one core: %s", n, strings.Join(busy, ", "))
		throughput := plain.done.Seconds() / done.Seconds()
		reqRatio := (r.reads + r.writes) / (plain.reads + plain.writes)
		b.Logf("tier %d: the same %d as plain Jobs (TTL 0, measured just before): created to deleted in %s (%.1f/s), API requests per Job %.2f reads, %.2f writes; "+
			"whole-life throughput through agentplane %.2f of the plain Jobs' (goal >= 0.9), API requests per run %.2f times theirs (goal <= 1.3)",
			n, total, plain.done.Round(time.Second), float64(total)/plain.done.Seconds(), plain.reads, plain.writes, throughput, reqRatio)
		b.Logf("tier %d: most reads (verb resource count, this benchmark's own included): %s", n, topReads(before, after))
		b.Logf("tier %d: most writes per run (verb resource/subresource, this benchmark's own included): %s", n, topWritesPerRun(before, after, total))
		b.Logf("tier %d: events per run (reporter kind reason: occurrences): %s", n, eventsPerRun(b, kc, ns, name+"-", total))
		b.Logf("tier %d: writes answered with an error (verb resource/subresource code: count): %s", n, top(before, after, "refused ", 20, "%.0f"))
		var gets []string
		for _, svc := range []string{"run-controller", "job-gc", "status-writer", "event-emitter"} {
			gets = append(gets, fmt.Sprintf("%s %.0f", svc, after["gets_"+svc]-before["gets_"+svc]))
		}
		b.Logf("tier %d: GETs of single objects made by agentplane's services (the rest of the API server's GETs are the cluster's own): %s",
			n, strings.Join(gets, ", "))
		p := fmt.Sprintf("n%d_", n)
		b.ReportMetric(drain.Seconds(), p+"drain_s")
		b.ReportMetric(done.Seconds(), p+"cleaned_s")
		b.ReportMetric(float64(total)/drain.Seconds(), p+"runs/s")
		b.ReportMetric(r.reads, p+"api_reads/run")
		b.ReportMetric(r.writes, p+"api_writes/run")
		b.ReportMetric(1000*r.cpu["run-controller"]/float64(total), p+"controller_cpu_ms/run")
		b.ReportMetric(peak["run-controller"]/(1<<20), p+"controller_peak_MiB")
		b.ReportMetric(1000*r.cpu["job-gc"]/float64(total), p+"jobgc_cpu_ms/run")
		b.ReportMetric(peak["job-gc"]/(1<<20), p+"jobgc_peak_MiB")
		b.ReportMetric(r.statusRate, p+"status_req/s")
		b.ReportMetric(r.eventsRate, p+"events_req/s")
		b.ReportMetric(plain.done.Seconds(), p+"plain_cleaned_s")
		b.ReportMetric(plain.reads, p+"plain_api_reads/run")
		b.ReportMetric(plain.writes, p+"plain_api_writes/run")
		b.ReportMetric(throughput, p+"throughput_vs_plain")
		b.ReportMetric(reqRatio, p+"api_req_vs_plain")
		if n == tiers[len(tiers)-1] {
			testenv.Goal(b, fmt.Sprintf("n%d_throughput_vs_plain>=0.9", n), throughput >= 0.9)
			testenv.Goal(b, fmt.Sprintf("n%d_api_req_vs_plain<=1.3", n), reqRatio <= 1.3)
		}
	}
	b.StopTimer()
	if len(results) >= 2 {
		first, last := results[0], results[len(results)-1]
		perRun := func(r tierResult) float64 { return r.reads + r.writes }
		reqGrowth := perRun(last) / perRun(first)
		cpuGrowth := (last.cpu["run-controller"] / float64(last.runs)) / (first.cpu["run-controller"] / float64(first.runs))
		b.ReportMetric(reqGrowth, "api_req_per_run_last/first")
		b.ReportMetric(cpuGrowth, "controller_cpu_per_run_last/first")
		// "Does not grow": within a quarter of the small tier's cost per run.
		testenv.Goal(b, "api_req_per_run_last/first<=1.25", reqGrowth <= 1.25)
		testenv.Goal(b, "controller_cpu_per_run_last/first<=1.25", cpuGrowth <= 1.25)
		b.Logf("cost per run, tier %d vs tier %d: API requests x%.2f, run-controller CPU x%.2f (goal: at most x1.25 each)", last.n, first.n, reqGrowth, cpuGrowth)
	}
}

// scrapeScale reads the API server's request counts (reads and writes), run-controller's
// succeeded runs and Jobs created, status-writer's and event-emitter's handled gRPC requests,
// and, for each pid given, its CPU seconds.
func scrapeScale(b *testing.B, kc kubernetes.Interface, pids map[string]int) map[string]float64 {
	b.Helper()
	m := map[string]float64{}
	num := func(line string) float64 {
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		return v
	}
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("read the API server's metrics: %v", err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		// Where the API server's time goes: the seconds it spent on each verb and resource.
		if strings.HasPrefix(l, "apiserver_request_duration_seconds_sum{") && !strings.Contains(l, `verb="WATCH"`) {
			m["secs "+label(l, "verb")+" "+label(l, "resource")+"/"+label(l, "subresource")] += num(l)
			continue
		}
		if !strings.HasPrefix(l, "apiserver_request_total{") {
			continue
		}
		switch {
		case strings.Contains(l, `verb="GET"`), strings.Contains(l, `verb="LIST"`), strings.Contains(l, `verb="WATCH"`):
			m["api_reads"] += num(l)
			m["reads "+label(l, "verb")+" "+label(l, "resource")] += num(l)
		default:
			m["api_writes"] += num(l)
			m["writes "+label(l, "verb")+" "+label(l, "resource")+"/"+label(l, "subresource")] += num(l)
			if code := label(l, "code"); !strings.HasPrefix(code, "2") {
				m["refused "+label(l, "verb")+" "+label(l, "resource")+"/"+label(l, "subresource")+" "+code] += num(l)
			}
		}
	}
	for _, svc := range []string{"run-controller", "status-writer", "event-emitter", "job-gc"} {
		out, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts[svc][1]+scaleOffset))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(out, "\n") {
			switch {
			case svc == "run-controller" && strings.HasPrefix(l, `agentplane_run_controller_runs{phase="Succeeded"}`):
				m["runs_succeeded"] = num(l)
			case svc == "run-controller" && strings.HasPrefix(l, "agentplane_run_controller_jobs_created_total "):
				m["jobs_created"] = num(l)
			// The GETs of single objects each service made (for a cache miss, a conflict, a
			// confirmation), so that the API server's GETs can be told apart from the cluster's own.
			case strings.HasPrefix(l, `agentplane_run_controller_api_requests_total{verb="get"}`),
				strings.HasPrefix(l, `agentplane_job_gc_api_requests_total{verb="get"}`),
				strings.HasPrefix(l, "agentplane_status_object_reads_total{") && strings.Contains(l, `source="api"`),
				strings.HasPrefix(l, `agentplane_events_run_reads_total{source="api"}`):
				m["gets_"+svc] += num(l)
			case (svc == "status-writer" || svc == "event-emitter") && strings.HasPrefix(l, "grpc_server_handled_total{") && !strings.Contains(l, "grpc.health") &&
				!strings.Contains(l, "grpc.reflection"):
				m["grpc_"+svc] += num(l)
			}
		}
	}
	for svc, pid := range pids {
		m["cpu_"+svc] = procCPUSeconds(b, pid)
	}
	return m
}

// label returns a Prometheus sample line's value of label name.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// topReads lists the five (verb, resource) pairs whose reads grew most between two scrapes.
func topReads(before, after map[string]float64) string {
	return top(before, after, "reads ", 5, "%.0f")
}

// topWritesPerRun lists the (verb, resource/subresource) pairs that grew by at least a twentieth
// of a request per run between two scrapes, most first, each divided by runs: where a run's
// writes go.
func topWritesPerRun(before, after map[string]float64, runs int) string {
	per := map[string]float64{}
	for k, v := range after {
		if strings.HasPrefix(k, "writes ") {
			if d := (v - before[k]) / float64(runs); d >= 0.05 {
				per[k] = d
			}
		}
	}
	return top(map[string]float64{}, per, "writes ", len(per), "%.2f")
}

// topSeconds lists the n (verb, resource/subresource) pairs on which the API server spent the
// most seconds between two scrapes (apiserver_request_duration_seconds), watches left out (they
// count the time they stayed open).
func topSeconds(before, after map[string]float64, n int) string {
	return top(before, after, "secs ", n, "%.1fs")
}

// top lists the n keys with prefix whose values grew most between two scrapes.
func top(before, after map[string]float64, prefix string, n int, format string) string {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	for k, v := range after {
		if strings.HasPrefix(k, prefix) {
			d = append(d, kv{strings.TrimPrefix(k, prefix), v - before[k]})
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i].v > d[j].v })
	var out []string
	for i := 0; i < len(d) && i < n; i++ {
		out = append(out, fmt.Sprintf("%s "+format, d[i].k, d[i].v))
	}
	return strings.Join(out, ", ")
}

// procCPUSeconds is a process's user + system CPU time (/proc/<pid>/stat, in clock ticks of
// 1/100 s, Linux's USER_HZ).
func procCPUSeconds(b *testing.B, pid int) float64 {
	v, ok := procCPU(strconv.Itoa(pid))
	if !ok {
		b.Fatalf("read the CPU time of pid %d from /proc", pid)
	}
	return v
}

// samplePeaks reads each process's resident memory (VmRSS) every second until stop, and sends
// the highest seen, in bytes.
func samplePeaks(pids map[string]int, stop <-chan struct{}) <-chan map[string]float64 {
	out := make(chan map[string]float64, 1)
	go func() {
		peak := map[string]float64{}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			for svc, pid := range pids {
				raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				if err != nil {
					continue
				}
				for _, l := range strings.Split(string(raw), "\n") {
					if strings.HasPrefix(l, "VmRSS:") {
						kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
						if kb*1024 > peak[svc] {
							peak[svc] = kb * 1024
						}
					}
				}
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// plainResult is the baseline of one tier: the same number of runs as plain Jobs.
type plainResult struct {
	done          time.Duration
	reads, writes float64 // per Job, the API server's own count less the benchmark's requests
}

// plainJobs is the baseline of a tier's whole life: total Jobs, each as plain as an AgentRun's
// (one pod, kwok ends it Succeeded 1-5 s after it is Ready) with ttlSecondsAfterFinished 0,
// created at once by the same client, measured until every Job and pod is gone (the TTL
// controller deletes each finished Job, the garbage collector its pod). The cluster's own
// requests count on this side as on agentplane's: the API server's apiserver_request_total less
// this benchmark's own.
func plainJobs(b *testing.B, kc kubernetes.Interface, tier string, total int, ownReads, ownWrites func() int64) plainResult {
	b.Helper()
	ctx := context.Background()
	const ns = "agents"
	sel := "bench=plain-" + tier
	count := func() int64 {
		jobs, pods := jobsAndPods(b, kc, ns, sel)
		return jobs + pods
	}
	before := scrapeScale(b, kc, nil)
	r0, w0 := ownReads(), ownWrites()
	start := time.Now()
	testenv.Parallel(b, total, 32, func(i int) error {
		_, err := kc.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plain-%s-%05d", tier, i), Labels: map[string]string{"bench": "plain-" + tier}},
			Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), TTLSecondsAfterFinished: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"bench": "plain-" + tier}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "agent", Image: "registry.example.com/agents/bench:1"}}}}},
		}, metav1.CreateOptions{})
		return err
	})
	deadline := start.Add(75 * time.Minute)
	for count() > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("tier %s baseline: %d plain Jobs and pods left after 75m", tier, count())
		}
		time.Sleep(2 * time.Second)
	}
	done := time.Since(start)
	after := scrapeScale(b, kc, nil)
	b.Logf("tier %s baseline: most writes per Job (verb resource/subresource, this benchmark's own included): %s", tier, topWritesPerRun(before, after, total))
	b.Logf("tier %s baseline: events per Job (reporter kind reason: occurrences): %s", tier, eventsPerRun(b, kc, ns, "plain-"+tier+"-", total))
	b.Logf("tier %s baseline: writes answered with an error (verb resource/subresource code: count): %s", tier, top(before, after, "refused ", 20, "%.0f"))
	return plainResult{done: done,
		reads:  (after["api_reads"] - before["api_reads"] - float64(ownReads()-r0)) / float64(total),
		writes: (after["api_writes"] - before["api_writes"] - float64(ownWrites()-w0)) / float64(total),
	}
}

// eventsPerRun lists the events of namespace ns about objects whose names start with prefix
// (one side of a tier: its runs, Jobs, pods and OrchestrationRuns), and sums their occurrences
// (an aggregated event's count, a series' count) per run by reporter, the involved object's kind
// and reason, largest first: where a side's event writes come from.
func eventsPerRun(b *testing.B, kc kubernetes.Interface, ns, prefix string, runs int) string {
	b.Helper()
	l, err := kc.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	per := map[string]float64{}
	total := 0.0
	for _, ev := range l.Items {
		if !strings.HasPrefix(ev.InvolvedObject.Name, prefix) {
			continue
		}
		n := max(ev.Count, 1)
		if ev.Series != nil {
			n = max(ev.Series.Count, n)
		}
		who := cmp.Or(ev.ReportingController, ev.Source.Component, "?")
		per["ev "+who+" "+ev.InvolvedObject.Kind+" "+ev.Reason] += float64(n) / float64(runs)
		total += float64(n) / float64(runs)
	}
	return fmt.Sprintf("%.2f in all; ", total) + top(map[string]float64{}, per, "ev ", len(per), "%.2f")
}

// jobsAndPods counts the Jobs and pods of namespace ns that selector matches (every one for ""):
// a list of one item says how many remain.
func jobsAndPods(b *testing.B, kc kubernetes.Interface, ns, selector string) (jobs, pods int64) {
	b.Helper()
	ctx := context.Background()
	opts := metav1.ListOptions{LabelSelector: selector, Limit: 1}
	jl, err := kc.BatchV1().Jobs(ns).List(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	pl, err := kc.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	jobs, pods = int64(len(jl.Items)), int64(len(pl.Items))
	if jl.RemainingItemCount != nil {
		jobs += *jl.RemainingItemCount
	}
	if pl.RemainingItemCount != nil {
		pods += *pl.RemainingItemCount
	}
	return jobs, pods
}
