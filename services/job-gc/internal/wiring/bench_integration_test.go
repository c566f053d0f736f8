//go:build integration

package wiring

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	remaining := func(ns string) int {
		l, err := setup.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return len(l.Items)
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

// BenchmarkRetentionWithTheArchiveOnVsOff (#37 item 6) measures job-gc deleting 1,000 finished
// AgentRuns at the end of their retention (0 s), from its start until every run is gone: with the
// run archive off, then on (a real PostgreSQL: each run held by the finalizer, captured, written,
// released, deleted), each with its own client at the service's default rate (100 QPS, burst
// 200), then both unthrottled. It reports off_time / on_time (goal: at least 0.8) and the archive's
// API requests and write time per run.
//
//	cd services/job-gc && go test -tags integration -run '^$' -bench RetentionWithTheArchive -benchtime 1x ./internal/wiring/
func BenchmarkRetentionWithTheArchiveOnVsOff(b *testing.B) {
	const n, workers = 1000, 4
	ctx := context.Background()
	setupCfg := *env.Config
	setupCfg.QPS, setupCfg.Burst = 2000, 4000
	setup := kubernetes.NewForConfigOrDie(&setupCfg)
	rc, err := kubeclient.RESTClientFor(&setupCfg, agentsv1alpha1.GroupVersion)
	if err != nil {
		b.Fatal(err)
	}
	left := func(ns string) int {
		l := &agentsv1alpha1.AgentRunList{}
		if err := rc.Get().Namespace(ns).Resource("agentruns").Do(ctx).Into(l); err != nil {
			b.Fatal(err)
		}
		return len(l.Items)
	}
	// measure runs job-gc over n finished runs of a new namespace and returns how long until they
	// are gone, and the API requests it made.
	measure := func(qps float32, burst int, archived bool) (time.Duration, float64) {
		ns := fmt.Sprintf("bench-%d", nsSerial.Add(1))
		if _, err := setup.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		now := metav1.Now()
		testenv.Parallel(b, n, 64, func(i int) error {
			ar := &agentsv1alpha1.AgentRun{
				TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r-%04d", i), Namespace: ns},
				Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"},
					TTLSecondsAfterFinished: ptr.To[int32](0)},
			}
			if err := rc.Post().Namespace(ns).Resource("agentruns").Body(ar).Do(ctx).Into(ar); err != nil {
				return err
			}
			ar.Status = agentsv1alpha1.AgentRunStatus{Phase: "Succeeded", FinishedAt: &now, ObservedGeneration: ar.Generation}
			return rc.Put().Namespace(ns).Resource("agentruns").Name(ar.Name).SubResource("status").Body(ar).Do(ctx).Error()
		})
		var requests atomic.Int64
		c := *env.Config
		c.QPS, c.Burst = qps, burst
		gcCfg := testenv.CountRequests(&c, &requests, nil)
		d := Deps{Kube: kubernetes.NewForConfigOrDie(gcCfg), REST: gcCfg, Registry: prometheus.NewRegistry()}
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
		start := time.Now()
		go func() { done <- g.Run(cctx) }()
		deadline := time.Now().Add(10 * time.Minute)
		for left(ns) > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d runs left in %s after 10m (archive %v)", left(ns), ns, archived)
			}
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if s, ok := d.Archive.(*lazyStore); ok {
			s.Close()
		}
		return took, float64(requests.Load()) / n
	}
	var off, on, offFree, onFree time.Duration
	var offReq, onReq float64
	for range b.N {
		t, r := measure(100, 200, false)
		off, offReq = off+t, r
		t, r = measure(100, 200, true)
		on, onReq = on+t, r
		t, _ = measure(-1, 0, false)
		offFree += t
		t, _ = measure(-1, 0, true)
		onFree += t
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(off.Seconds()/float64(b.N), "off-s")
	b.ReportMetric(on.Seconds()/float64(b.N), "on-s")
	b.ReportMetric(off.Seconds()/on.Seconds(), "on-vs-off")
	b.ReportMetric(offFree.Seconds()/onFree.Seconds(), "on-vs-off-unthrottled")
	b.ReportMetric(offReq, "off-requests/run")
	b.ReportMetric(onReq, "on-requests/run")
	testenv.Goal(b, "on-vs-off>=0.8", off.Seconds()/on.Seconds() >= 0.8)
	testenv.Goal(b, "on-vs-off-unthrottled>=0.8", offFree.Seconds()/onFree.Seconds() >= 0.8)
}
