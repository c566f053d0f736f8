//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/testenv"
)

// archiveBenchRuns is how many AgentRuns each side of BenchmarkArchiveTenThousandRuns runs
// (AGENTPLANE_BENCH_ARCHIVE_RUNS; default 10000).
func archiveBenchRuns() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTPLANE_BENCH_ARCHIVE_RUNS")); err == nil && n >= 10 {
		return n
	}
	return 10000
}

// BenchmarkArchiveTenThousandRuns is #37's item 6 through the whole system: on one local control
// plane (`make up`: kwok plays the pods; PostgreSQL from Debian's package), 10,000 AgentRuns with
// ttlSecondsAfterFinished 0 are created at once and timed until job-gc has deleted every one at
// the end of its retention and no Job or pod is left, first with job-gc's run archive off
// (AGENTPLANE_ARCHIVE=0, the charts' default), then, job-gc restarted, with it on: each run held
// by the archive's finalizer while it runs, then captured (its Events, its Job's outcome and pod,
// its log tail: kwok serves none, so the reason is kept), written and let go when it finishes,
// and deleted. Reported: the whole-life throughput with the archive on as a fraction of off (the
// retention is part of every run's life here; goal >= 0.8), and what the archive costs per run,
// from the two sides' difference: the API server's requests (less this benchmark's own), job-gc's
// CPU, PostgreSQL's CPU (the server and its backends), the capture and write time job-gc
// measures, and the rows' size on disk. The archive must hold every run of the "on" side exactly
// once, Succeeded.
//
//	make bench-archive   # or: cd e2e && go test -tags e2e -run '^$' -bench ArchiveTenThousandRuns -benchtime 1x -timeout 120m .
func BenchmarkArchiveTenThousandRuns(b *testing.B) {
	n := archiveBenchRuns()
	ctx := context.Background()
	root := repoRoot(b)
	stackEnv := []string{"JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS=0"}
	dir, cfg := localStack(b, scaleOffset, 2000, append(stackEnv, "AGENTPLANE_ARCHIVE=0")...)
	var ownReads, ownWrites atomic.Int64
	cfg = testenv.CountRequests(cfg, &ownReads, func(r *http.Request) bool { return r.Method == http.MethodGet })
	cfg = testenv.CountRequests(cfg, &ownWrites, func(r *http.Request) bool { return r.Method != http.MethodGet })
	kc := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	const ns = "agents"
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agents"}).Namespace(ns).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "Agent", "metadata": map[string]any{"name": "bench"},
			"spec": map[string]any{"providerRef": map[string]any{"name": "bench"}, "defaults": map[string]any{"image": "registry.example.com/agents/bench:1"}},
		}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pgPort := 15432 + scaleOffset
	pgBin, err := testenv.PostgresBin()
	if err != nil {
		b.Fatal(err)
	}
	psql := func(query string) string {
		out, err := run(ctx, b, nil, filepath.Join(pgBin, "psql"), "-X", "-A", "-t", "-h", "127.0.0.1", "-p", strconv.Itoa(pgPort), "-U", "agentplane", "-d", "agentplane", "-c", query)
		if err != nil {
			b.Fatalf("psql %q: %v\n%s", query, err, out)
		}
		return strings.TrimSpace(out)
	}
	pidOf := func(name string) int {
		raw, err := os.ReadFile(filepath.Join(dir, "run", name+".pid"))
		if err != nil {
			b.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			b.Fatal(err)
		}
		return pid
	}
	// restartJobGC starts job-gc again with the archive on or off (make down ONLY=job-gc, then
	// make up, which starts only what is not running).
	restartJobGC := func(archive bool) {
		env := append([]string{fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", scaleOffset), "AGENTPLANE_ARCHIVE=" + map[bool]string{true: "1", false: "0"}[archive]}, stackEnv...)
		for _, target := range [][]string{{"down", "ONLY=job-gc"}, {"up"}} {
			args := append([]string{"-C", root, "-s"}, target...)
			if out, err := run(ctx, b, env, "make", append(args, "LOCAL_DIR="+dir)...); err != nil {
				b.Fatalf("make %s: %v\n%s", strings.Join(target, " "), err, out)
			}
		}
	}
	jobGC := func(pattern string) float64 {
		out, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts["job-gc"][1]+scaleOffset))
		if err != nil {
			b.Fatal(err)
		}
		v := 0.0
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, pattern) {
				f, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
				v += f
			}
		}
		return v
	}

	type sideResult struct {
		took                       time.Duration
		requests                   float64 // per run
		jobGCCPU, pgCPU, writeSecs float64 // seconds over the side
		writes                     float64
	}
	side := func(name string, archive bool) sideResult {
		restartJobGC(archive)
		pids := map[string]int{"job-gc": pidOf("job-gc"), "postgres": pidOf("postgres")}
		cpu := func() (float64, float64) { return procCPUSeconds(b, pids["job-gc"]), procTreeCPU(b, pids["postgres"]) }
		before := scrapeScale(b, kc, nil)
		r0, w0 := ownReads.Load(), ownWrites.Load()
		gc0, pg0 := cpu()
		deleted0, writes0, secs0 := jobGC(`agentplane_job_gc_deletions_total{kind="AgentRun"}`), jobGC(`agentplane_job_gc_archive_writes_total{result="ok"}`), jobGC("agentplane_job_gc_archive_write_seconds_sum")
		start := time.Now()
		testenv.Parallel(b, n, 32, func(i int) error {
			_, err := dyn.Resource(agentRunsGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "AgentRun",
				"metadata": map[string]any{"name": fmt.Sprintf("%s-%05d", name, i)},
				"spec": map[string]any{"agentRef": map[string]any{"name": "bench"}, "runtime": map[string]any{"type": "job"},
					"ttlSecondsAfterFinished": 0},
			}}, metav1.CreateOptions{})
			return err
		})
		deadline := start.Add(60 * time.Minute)
		for {
			gone := jobGC(`agentplane_job_gc_deletions_total{kind="AgentRun"}`) - deleted0
			jobs, pods := jobsAndPods(b, kc, ns, "")
			if int(gone) >= n && jobs == 0 && pods == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: %d of %d AgentRuns deleted, %d Jobs and %d pods left after 60m", name, int(gone), n, jobs, pods)
			}
			time.Sleep(2 * time.Second)
		}
		took := time.Since(start)
		gc1, pg1 := cpu()
		after := scrapeScale(b, kc, nil)
		own := float64(ownReads.Load()-r0) + float64(ownWrites.Load()-w0)
		res := sideResult{took: took, jobGCCPU: gc1 - gc0, pgCPU: pg1 - pg0,
			requests:  (after["api_reads"] + after["api_writes"] - before["api_reads"] - before["api_writes"] - own) / float64(n),
			writes:    jobGC(`agentplane_job_gc_archive_writes_total{result="ok"}`) - writes0,
			writeSecs: jobGC("agentplane_job_gc_archive_write_seconds_sum") - secs0}
		b.Logf("%s (archive %v): %d AgentRuns created to deleted in %s (%.1f/s); %.2f API requests per run; job-gc %.2f CPU ms/run, PostgreSQL %.2f CPU ms/run; %d archive writes",
			name, archive, n, took.Round(time.Second), float64(n)/took.Seconds(), res.requests, 1000*res.jobGCCPU/float64(n), 1000*res.pgCPU/float64(n), int(res.writes))
		return res
	}

	b.ResetTimer()
	var off, on sideResult
	for i := range b.N {
		off = side(fmt.Sprintf("off%d", i), false)
		on = side(fmt.Sprintf("on%d", i), true)
		b.StopTimer()
		// Every run of the "on" side is in the archive exactly once, Succeeded; none of "off".
		rows := psql(fmt.Sprintf("SELECT count(*), count(DISTINCT name), count(*) FILTER (WHERE phase = 'Succeeded') FROM runs WHERE namespace = '%s' AND name LIKE 'on%d-%%'", ns, i))
		if want := fmt.Sprintf("%d|%d|%d", n, n, n); rows != want {
			b.Errorf("the archive holds %q (rows|names|Succeeded) of the %d runs of the archived side, want %s", rows, n, want)
		}
		if offRows := psql(fmt.Sprintf("SELECT count(*) FROM runs WHERE namespace = '%s' AND name LIKE 'off%d-%%'", ns, i)); offRows != "0" {
			b.Errorf("the archive holds %s runs of the side with archiving off, want 0", offRows)
		}
		if int(on.writes) != n {
			b.Errorf("job-gc wrote %d runs to the archive, want %d (one each)", int(on.writes), n)
		}
		b.StartTimer()
	}
	b.StopTimer()
	bytesPerRun, _ := strconv.ParseFloat(psql("SELECT pg_total_relation_size('runs') / greatest(count(*), 1) FROM runs"), 64)
	perRun := func(s float64) float64 { return 1000 * s / float64(n) }
	throughput := off.took.Seconds() / on.took.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(off.took.Seconds(), "off_s")
	b.ReportMetric(on.took.Seconds(), "on_s")
	b.ReportMetric(throughput, "on_vs_off_throughput")
	b.ReportMetric(off.requests, "off_api_requests/run")
	b.ReportMetric(on.requests, "on_api_requests/run")
	b.ReportMetric(on.requests-off.requests, "archive_api_requests/run")
	b.ReportMetric(perRun(off.jobGCCPU), "off_jobgc_cpu_ms/run")
	b.ReportMetric(perRun(on.jobGCCPU), "on_jobgc_cpu_ms/run")
	b.ReportMetric(perRun(on.pgCPU), "postgres_cpu_ms/run")
	b.ReportMetric(perRun(on.writeSecs), "archive_write_ms/run")
	b.ReportMetric(bytesPerRun, "archive_bytes/run")
	testenv.Goal(b, "on_vs_off_throughput>=0.8", throughput >= 0.8)
	b.Logf("%d runs, created to deleted: archive off %s, on %s: %.2f of off's throughput (goal >= 0.8); the archive's cost per run: %+.2f API requests (%.2f against %.2f), "+
		"job-gc %+.2f CPU ms (%.2f against %.2f), PostgreSQL %.2f CPU ms, %.2f ms to capture and write, %.0f bytes on disk (the table and its indexes)",
		n, off.took.Round(time.Second), on.took.Round(time.Second), throughput, on.requests-off.requests, on.requests, off.requests,
		perRun(on.jobGCCPU-off.jobGCCPU), perRun(on.jobGCCPU), perRun(off.jobGCCPU), perRun(on.pgCPU), perRun(on.writeSecs), bytesPerRun)
}

// procTreeCPU is the CPU seconds of pid and every process below it, those that ended and were
// waited for included (PostgreSQL's backends are processes of their own, children of the server).
func procTreeCPU(b *testing.B, pid int) float64 {
	total := procCPUSeconds(b, pid)
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(raw), ')'); i >= 0 {
			if f := strings.Fields(string(raw[i+1:])); len(f) > 14 {
				cu, _ := strconv.ParseFloat(f[13], 64)
				cs, _ := strconv.ParseFloat(f[14], 64)
				total += (cu + cs) / userHZ
			}
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(raw), ')')
		if f := strings.Fields(string(raw[i+1:])); i >= 0 && len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	below := func(p int) bool {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				return true
			}
		}
		return false
	}
	for p := range parent {
		if p != pid && below(p) {
			if v, ok := procCPU(strconv.Itoa(p)); ok {
				total += v
			}
		}
	}
	return total
}
