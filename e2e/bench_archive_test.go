//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
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
// plane (`make up`: kwok plays the pods; PostgreSQL from Debian's package), 10,000 AgentRuns go
// through their whole life twice, first with job-gc's run archive off (AGENTPLANE_ARCHIVE=0, the
// charts' default), then, job-gc restarted, with it on: each run held by the archive's finalizer
// while it runs, then captured (its Events, its Job's outcome and pod, its log tail: kwok serves
// none, so the reason is kept), written and let go of when it finishes. Each side has two phases:
//
//   - life: the runs created at once (job-gc's default retention, 30 days, keeps them), timed
//     until every one is Succeeded (and, with the archive on, written) and no Job or pod is left;
//   - retention: job-gc restarted with a retention of 0 s, timed from its start until it has
//     deleted every run (a restarted job-gc with the archive on asks the archive about each run
//     before it deletes it: it remembers nothing of the writes of the one before).
//
// Reported: the retention's throughput with the archive on as a fraction of off (goal >= 0.8),
// the whole life's likewise, and what the archive costs per run, from the two sides' difference:
// the API server's requests (less this benchmark's own), the API server's, job-gc's and
// PostgreSQL's CPU (the server and its backends), the capture and write time job-gc measures,
// and the rows' size on disk. The archive must hold every run of the "on" side exactly once,
// Succeeded, and none of the "off" side.
//
//	make bench-archive   # or: cd e2e && go test -tags e2e -run '^$' -bench ArchiveTenThousandRuns -benchtime 1x -timeout 150m .
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
	// restartJobGC starts job-gc again with the archive on or off and env (make down ONLY=job-gc,
	// then make up, which starts only what is not running, with the variables given).
	restartJobGC := func(archive bool, env ...string) {
		env = append(append([]string{fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", scaleOffset), "AGENTPLANE_ARCHIVE=" + map[bool]string{true: "1", false: "0"}[archive]}, stackEnv...), env...)
		for _, target := range [][]string{{"down", "ONLY=job-gc"}, {"up"}} {
			args := append([]string{"-C", root, "-s"}, target...)
			if out, err := run(ctx, b, env, "make", append(args, "LOCAL_DIR="+dir)...); err != nil {
				b.Fatalf("make %s: %v\n%s", strings.Join(target, " "), err, out)
			}
		}
	}
	metric := func(svc, pattern string) float64 {
		out, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts[svc][1]+scaleOffset))
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
	waitUntil := func(what string, deadline time.Time, done func() (bool, string)) {
		for {
			ok, state := done()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: not done after %s: %s", what, time.Until(deadline), state)
			}
			time.Sleep(2 * time.Second)
		}
	}

	// phase is one timed part of a side: its time, the API requests per run (the server's count
	// less this benchmark's own) and CPU seconds by process.
	type phase struct {
		took     time.Duration
		requests float64
		cpu      map[string]float64
		seconds  string // the API server's busiest requests, by verb and resource
	}
	measure := func(pids map[string]int, body func()) phase {
		cpu := func() map[string]float64 {
			m := map[string]float64{}
			for name, pid := range pids {
				if name == "postgres" {
					m[name] = procTreeCPU(b, pid)
				} else {
					m[name] = procCPUSeconds(b, pid)
				}
			}
			return m
		}
		before, cpu0, pids0 := scrapeScale(b, kc, nil), cpu(), maps.Clone(pids)
		r0, w0 := ownReads.Load(), ownWrites.Load()
		start := time.Now()
		body()
		p := phase{took: time.Since(start), cpu: cpu()}
		after := scrapeScale(b, kc, nil)
		own := float64(ownReads.Load()-r0) + float64(ownWrites.Load()-w0)
		p.requests = (after["api_reads"] + after["api_writes"] - before["api_reads"] - before["api_writes"] - own) / float64(n)
		p.seconds = topSeconds(before, after, 8)
		for k, v := range cpu0 {
			if pids[k] == pids0[k] { // a process restarted during the phase (job-gc) counts from its start
				p.cpu[k] -= v
			}
		}
		return p
	}
	type sideResult struct {
		life, retention      phase
		writes, writeSeconds float64
	}
	side := func(name string, archive bool) sideResult {
		var r sideResult
		restartJobGC(archive)
		pids := map[string]int{"job-gc": pidOf("job-gc"), "postgres": pidOf("postgres"), "kube-apiserver": pidOf("kube-apiserver"), "etcd": pidOf("etcd")}
		writes0, secs0 := metric("job-gc", `agentplane_job_gc_archive_writes_total{result="ok"}`), metric("job-gc", "agentplane_job_gc_archive_write_seconds_sum")
		r.life = measure(pids, func() {
			testenv.Parallel(b, n, 32, func(i int) error {
				_, err := dyn.Resource(agentRunsGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "AgentRun",
					"metadata": map[string]any{"name": fmt.Sprintf("%s-%05d", name, i)},
					"spec":     map[string]any{"agentRef": map[string]any{"name": "bench"}, "runtime": map[string]any{"type": "job"}},
				}}, metav1.CreateOptions{})
				return err
			})
			waitUntil(name+": every run Succeeded, archived, its Job and pod gone", time.Now().Add(60*time.Minute), func() (bool, string) { //nolint:contextcheck // jobsAndPods reads with its own background context
				succeeded := metric("run-controller", `agentplane_run_controller_runs{phase="Succeeded"}`)
				written := metric("job-gc", `agentplane_job_gc_archive_writes_total{result="ok"}`) - writes0
				jobs, pods := jobsAndPods(b, kc, ns, "")
				return int(succeeded) >= n && (!archive || int(written) >= n) && jobs == 0 && pods == 0,
					fmt.Sprintf("%d Succeeded, %d archived, %d Jobs, %d pods", int(succeeded), int(written), jobs, pods)
			})
		})
		r.writes = metric("job-gc", `agentplane_job_gc_archive_writes_total{result="ok"}`) - writes0
		r.writeSeconds = metric("job-gc", "agentplane_job_gc_archive_write_seconds_sum") - secs0
		r.retention = measure(pids, func() {
			restartJobGC(archive, "JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS=0")
			pids["job-gc"] = pidOf("job-gc")
			waitUntil(name+": every run deleted at the end of its retention", time.Now().Add(30*time.Minute), func() (bool, string) {
				gone := metric("job-gc", `agentplane_job_gc_deletions_total{kind="AgentRun"}`)
				return int(gone) >= n, fmt.Sprintf("%d deleted", int(gone))
			})
		})
		b.Logf("%s (archive %v): %d AgentRuns created to Succeeded and cleaned up in %s (%.1f/s), %.2f API requests per run; deleted at the end of their retention in %s (%.1f/s), %.2f API requests per run; %d archive writes",
			name, archive, n, r.life.took.Round(time.Second), float64(n)/r.life.took.Seconds(), r.life.requests,
			r.retention.took.Round(time.Second), float64(n)/r.retention.took.Seconds(), r.retention.requests, int(r.writes))
		b.Logf("%s: the API server's time over the life, by request (watches left out): %s", name, r.life.seconds)
		b.Logf("%s: over the retention: %s", name, r.retention.seconds)
		return r
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
	retention := off.retention.took.Seconds() / on.retention.took.Seconds()
	life := off.life.took.Seconds() / on.life.took.Seconds()
	b.ReportMetric(0, "ns/op")
	for _, s := range []struct {
		name string
		r    sideResult
	}{{"off", off}, {"on", on}} {
		b.ReportMetric(s.r.life.took.Seconds(), s.name+"_life_s")
		b.ReportMetric(s.r.retention.took.Seconds(), s.name+"_retention_s")
		b.ReportMetric(s.r.life.requests, s.name+"_life_api_requests/run")
		b.ReportMetric(s.r.retention.requests, s.name+"_retention_api_requests/run")
		for _, p := range []string{"kube-apiserver", "etcd", "job-gc"} {
			b.ReportMetric(perRun(s.r.life.cpu[p]), s.name+"_life_"+p+"_cpu_ms/run")
		}
		b.ReportMetric(perRun(s.r.retention.cpu["job-gc"]), s.name+"_retention_job-gc_cpu_ms/run")
	}
	b.ReportMetric(retention, "retention_on_vs_off")
	b.ReportMetric(life, "life_on_vs_off")
	b.ReportMetric(on.life.requests-off.life.requests, "archive_api_requests/run")
	b.ReportMetric(perRun(on.life.cpu["postgres"]+on.retention.cpu["postgres"]), "postgres_cpu_ms/run")
	b.ReportMetric(perRun(on.writeSeconds), "archive_write_ms/run")
	b.ReportMetric(bytesPerRun, "archive_bytes/run")
	testenv.Goal(b, "retention_on_vs_off>=0.8", retention >= 0.8)
	b.Logf("%d runs: retention with the archive on %.2f of off's throughput (goal >= 0.8; %s against %s); whole life %.2f (%s against %s); "+
		"the archive's cost per run over the life: %+.2f API requests (%.2f against %.2f), kube-apiserver %+.2f CPU ms, etcd %+.2f, job-gc %+.2f, PostgreSQL %.2f (life and retention); "+
		"%.2f ms to capture and write; %.0f bytes on disk (the table and its indexes)",
		n, retention, on.retention.took.Round(time.Second), off.retention.took.Round(time.Second), life, on.life.took.Round(time.Second), off.life.took.Round(time.Second),
		on.life.requests-off.life.requests, on.life.requests, off.life.requests,
		perRun(on.life.cpu["kube-apiserver"]-off.life.cpu["kube-apiserver"]), perRun(on.life.cpu["etcd"]-off.life.cpu["etcd"]), perRun(on.life.cpu["job-gc"]-off.life.cpu["job-gc"]),
		perRun(on.life.cpu["postgres"]+on.retention.cpu["postgres"]), perRun(on.writeSeconds), bytesPerRun)
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
