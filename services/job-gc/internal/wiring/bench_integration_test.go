//go:build integration

package wiring

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/testenv"
)

// BenchmarkGCFiveThousandFinishedJobs measures job-gc releasing 5,000 finished Jobs that were
// marked for deletion (as the TTL controller does) and whose runs have recorded their outcome,
// from job-gc's start (informers synced included) until every Job is gone; the baseline, in the
// same run, lists and deletes 5,000 Jobs directly with client-go. Each side has its own client,
// first both at the service's default client rate (100 QPS, burst 200), then both unthrottled;
// 4 workers each. It reports direct_time / gc_time for each (goal: at least 0.8).
//
//	cd services/job-gc && go test -tags integration -run '^$' -bench GCFiveThousand -benchtime 1x ./internal/wiring/
func BenchmarkGCFiveThousandFinishedJobs(b *testing.B) {
	const n, workers = 5000, 4
	ctx := context.Background()
	setupCfg := *env.Config
	setupCfg.QPS, setupCfg.Burst = 2000, 4000
	setup := kubernetes.NewForConfigOrDie(&setupCfg)
	rc, err := kubeclient.RESTClientFor(&setupCfg, agentsv1alpha1.GroupVersion)
	if err != nil {
		b.Fatal(err)
	}
	// Each side gets its own client with the same budget: libs/config's defaults for every
	// service (100 QPS, burst 200), then none at all (client-go does not limit a negative QPS).
	clientCfg := func(qps float32, burst int) *rest.Config {
		c := *env.Config
		c.QPS, c.Burst = qps, burst
		return &c
	}
	newNS := func() string {
		ns := fmt.Sprintf("bench-%d", nsSerial.Add(1))
		if _, err := setup.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return ns
	}
	job := func(ns, name string, run *agentsv1alpha1.AgentRun) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
		}
		if run != nil {
			j.Finalizers = []string{agentsv1alpha1.FinalizerJobResult}
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun",
				Name: run.Name, UID: run.UID, Controller: ptr.To(true)}}
		}
		return j
	}
	// How many Jobs are left, from a list of one (its remainingItemCount counts the rest): the
	// wait polls every 100 ms, and a full list of up to 5,000 Jobs each time loaded the API server
	// under the side being measured, the longer-running side most.
	remaining := func(ns string) int {
		l, err := setup.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			b.Fatal(err)
		}
		n := len(l.Items)
		if l.RemainingItemCount != nil {
			n += int(*l.RemainingItemCount)
		} else if l.Continue != "" {
			b.Fatalf("a list of one Job in %s has more but no remainingItemCount", ns)
		}
		return n
	}
	waitGone := func(ns string) {
		deadline := time.Now().Add(10 * time.Minute)
		for remaining(ns) > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d Jobs left in %s after 10m", remaining(ns), ns)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	measure := func(qps float32, burst int) (direct, viaGC time.Duration) {
		measured := kubernetes.NewForConfigOrDie(clientCfg(qps, burst))
		// Baseline: list the Jobs and delete each directly.
		dns := newNS()
		testenv.Parallel(b, n, 64, func(i int) error {
			_, err := setup.BatchV1().Jobs(dns).Create(ctx, job(dns, fmt.Sprintf("j-%04d", i), nil), metav1.CreateOptions{})
			return err
		})
		start := time.Now()
		l, err := measured.BatchV1().Jobs(dns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		testenv.Parallel(b, len(l.Items), workers, func(i int) error {
			return measured.BatchV1().Jobs(dns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		})
		waitGone(dns)
		direct += time.Since(start)

		// job-gc: finished runs, their held Jobs marked for deletion.
		gns := newNS()
		now := metav1.Now()
		testenv.Parallel(b, n, 64, func(i int) error {
			ar := &agentsv1alpha1.AgentRun{
				TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r-%04d", i), Namespace: gns},
				Spec:       agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}},
			}
			if err := rc.Post().Namespace(gns).Resource("agentruns").Body(ar).Do(ctx).Into(ar); err != nil {
				return err
			}
			ar.Status = agentsv1alpha1.AgentRunStatus{Phase: "Succeeded", FinishedAt: &now, ObservedGeneration: ar.Generation}
			if err := rc.Put().Namespace(gns).Resource("agentruns").Name(ar.Name).SubResource("status").Body(ar).Do(ctx).Into(ar); err != nil {
				return err
			}
			name := fmt.Sprintf("j-%04d", i)
			if _, err := setup.BatchV1().Jobs(gns).Create(ctx, job(gns, name, ar), metav1.CreateOptions{}); err != nil {
				return err
			}
			return setup.BatchV1().Jobs(gns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		})
		gcCfg := clientCfg(qps, burst)
		g, err := New(Config{Namespaces: []string{gns}, Retention: 24 * time.Hour, MissingGrace: time.Hour, HoldWarning: time.Hour, Workers: workers},
			Deps{Kube: kubernetes.NewForConfigOrDie(gcCfg), REST: gcCfg, Registry: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start = time.Now()
		go func() { done <- g.Run(cctx) }()
		waitGone(gns)
		viaGC += time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return direct, viaGC
	}
	var direct, viaGC, directFree, viaGCFree time.Duration
	for range b.N {
		d, g := measure(100, 200)
		direct, viaGC = direct+d, viaGC+g
		d, g = measure(-1, 0)
		directFree, viaGCFree = directFree+d, viaGCFree+g
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(direct.Seconds()/float64(b.N), "direct-s")
	b.ReportMetric(viaGC.Seconds()/float64(b.N), "gc-s")
	b.ReportMetric(direct.Seconds()/viaGC.Seconds(), "gc-vs-direct")
	b.ReportMetric(directFree.Seconds()/float64(b.N), "direct-unthrottled-s")
	b.ReportMetric(viaGCFree.Seconds()/float64(b.N), "gc-unthrottled-s")
	b.ReportMetric(directFree.Seconds()/viaGCFree.Seconds(), "gc-vs-direct-unthrottled")
	testenv.Goal(b, "gc-vs-direct>=0.8", direct.Seconds()/viaGC.Seconds() >= 0.8)
	testenv.Goal(b, "gc-vs-direct-unthrottled>=0.8", directFree.Seconds()/viaGCFree.Seconds() >= 0.8)
}

// BenchmarkRetentionWithTheArchiveOnVsOff (#37 item 6) measures job-gc at the end of the
// retention of 1,000 finished AgentRuns, with the run archive off, then on (a real PostgreSQL),
// as a cluster sees them: job-gc runs while the runs run (with the archive on, it holds each with
// the archive's finalizer), the runs finish (the benchmark writes their status), job-gc archives
// each when it finishes (captured, written, released), and later their retention comes due
// (job-gc's clock moves a day on, and the benchmark labels each run, 64 at a time, so that job-gc
// looks at it again; on both sides alike). The retention is timed from the clock's move until
// every run is gone, and counted in job-gc's API requests. Each side has its own client at the service's default rate (100 QPS, burst
// 200), then both unthrottled. It reports off_time / on_time for the retention (goal: at least
// 0.8), each side's requests per run at retention, and what archiving cost before it: requests
// per run, write time per run and the archive's throughput (runs archived per second from the
// finish).
//
//	cd services/job-gc && go test -tags integration -run '^$' -bench RetentionWithTheArchive -benchtime 1x ./internal/wiring/
func BenchmarkRetentionWithTheArchiveOnVsOff(b *testing.B) {
	const n, workers = 1000, 4
	ctx := context.Background()
	setupCfg := *env.Config
	setupCfg.QPS, setupCfg.Burst = 2000, 4000
	rc, err := kubeclient.RESTClientFor(&setupCfg, agentsv1alpha1.GroupVersion)
	if err != nil {
		b.Fatal(err)
	}
	setup := kubernetes.NewForConfigOrDie(&setupCfg)
	list := func(ns string) []agentsv1alpha1.AgentRun {
		l := &agentsv1alpha1.AgentRunList{}
		if err := rc.Get().Namespace(ns).Resource("agentruns").Do(ctx).Into(l); err != nil {
			b.Fatal(err)
		}
		return l.Items
	}
	waitFor := func(what string, ok func() bool) {
		deadline := time.Now().Add(10 * time.Minute)
		for !ok() {
			if time.Now().After(deadline) {
				b.Fatalf("not %s after 10m", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// setStatus writes every run's status (64 at a time), finished at finishedAt.
	setStatus := func(ns string, runs []agentsv1alpha1.AgentRun, finishedAt metav1.Time) {
		testenv.Parallel(b, len(runs), 64, func(i int) error {
			ar := runs[i]
			ar.Status.Phase, ar.Status.FinishedAt, ar.Status.ObservedGeneration = "Succeeded", &finishedAt, ar.Generation
			return rc.Put().Namespace(ns).Resource("agentruns").Name(ar.Name).SubResource("status").Body(&ar).Do(ctx).Error()
		})
	}
	type result struct {
		retention                time.Duration
		retentionReq, archiveReq float64
		archive                  time.Duration // from the finish until every run is archived and let go
		writeSeconds             float64       // the archive's capture and write, summed over the runs
	}
	measure := func(qps float32, burst int, archived bool) result {
		ns := fmt.Sprintf("bench-%d", nsSerial.Add(1))
		if _, err := setup.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		var requests, later atomic.Int64
		c := *env.Config
		c.QPS, c.Burst = qps, burst
		gcCfg := testenv.CountRequests(&c, &requests, nil)
		reg := prometheus.NewRegistry()
		d := Deps{Kube: kubernetes.NewForConfigOrDie(gcCfg), REST: gcCfg, Registry: reg,
			Now: func() time.Time { return time.Now().Add(time.Duration(later.Load())) }}
		if archived {
			ac, _ := archiveFor(b) //nolint:contextcheck // the helper makes the database with its own background context
			d.Archive = newLazyStore(ac)
		}
		g, err := New(Config{Namespaces: []string{ns}, Retention: 24 * time.Hour, OrchRetention: 24 * time.Hour, MissingGrace: time.Hour,
			HoldWarning: time.Hour, Workers: workers}, d)
		if err != nil {
			b.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- g.Run(cctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			if s, ok := d.Archive.(*lazyStore); ok {
				s.Close()
			}
		}()
		// The runs, running (no status yet).
		testenv.Parallel(b, n, 64, func(i int) error {
			ar := &agentsv1alpha1.AgentRun{
				TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r-%04d", i), Namespace: ns},
				Spec:       agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}},
			}
			return rc.Post().Namespace(ns).Resource("agentruns").Body(ar).Do(ctx).Error()
		})
		held := func(want bool) func() bool {
			return func() bool {
				for _, ar := range list(ns) {
					if slices.Contains(ar.Finalizers, agentsv1alpha1.FinalizerArchive) != want {
						return false
					}
				}
				return true
			}
		}
		if archived {
			waitFor("every run held", held(true))
		}
		runs := list(ns)
		finish := time.Now()
		setStatus(ns, runs, metav1.NewTime(finish))
		var r result
		if archived {
			waitFor("every run archived", func() bool {
				return testenv.Metric(b, reg, "agentplane_job_gc_archive_writes_total", "result", "ok") >= n
			})
			waitFor("every run let go", held(false))
			r.archive = time.Since(finish)
			r.writeSeconds = histogramSum(b, reg, "agentplane_job_gc_archive_write_seconds")
		}
		time.Sleep(time.Second) // job-gc's last reactions to the finish
		r.archiveReq = float64(requests.Load()) / n
		// The retention comes due: job-gc's clock moves a day on, and a label on each run (64 at
		// a time) makes job-gc look at it again.
		before := requests.Load()
		start := time.Now()
		later.Store(int64(25 * time.Hour))
		testenv.Parallel(b, len(runs), 64, func(i int) error {
			return rc.Patch(types.MergePatchType).Namespace(ns).Resource("agentruns").Name(runs[i].Name).
				Body([]byte(`{"metadata":{"labels":{"retention":"over"}}}`)).Do(ctx).Error()
		})
		waitFor("every run deleted", func() bool { return len(list(ns)) == 0 })
		r.retention = time.Since(start)
		r.retentionReq = float64(requests.Load()-before) / n
		return r
	}
	var off, on, offFree, onFree time.Duration
	var offReq, onReq, archiveReq, archiveS, writeS float64
	for range b.N {
		r := measure(100, 200, false)
		off, offReq = off+r.retention, r.retentionReq
		r = measure(100, 200, true)
		on, onReq, archiveReq = on+r.retention, r.retentionReq, r.archiveReq
		archiveS, writeS = archiveS+r.archive.Seconds(), writeS+r.writeSeconds
		offFree += measure(-1, 0, false).retention
		onFree += measure(-1, 0, true).retention
	}
	N := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(off.Seconds()/N, "off-s")
	b.ReportMetric(on.Seconds()/N, "on-s")
	b.ReportMetric(off.Seconds()/on.Seconds(), "on-vs-off")
	b.ReportMetric(offFree.Seconds()/onFree.Seconds(), "on-vs-off-unthrottled")
	b.ReportMetric(offReq, "off-requests/run")
	b.ReportMetric(onReq, "on-requests/run")
	b.ReportMetric(archiveReq, "archive-requests/run")
	b.ReportMetric(1000*writeS/(N*n), "archive-write-ms/run")
	b.ReportMetric(N*n/archiveS, "archived-runs/s")
	testenv.Goal(b, "on-vs-off>=0.8", off.Seconds()/on.Seconds() >= 0.8)
	testenv.Goal(b, "on-vs-off-unthrottled>=0.8", offFree.Seconds()/onFree.Seconds() >= 0.8)
}

// histogramSum is the sum of the observations of the histogram name in g.
func histogramSum(b *testing.B, g prometheus.Gatherer, name string) float64 {
	families, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
			return sum
		}
	}
	b.Fatalf("no histogram %s", name)
	return 0
}
