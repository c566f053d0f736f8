package testenv

import (
	"context"

	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Writers are status-writer and event-emitter (with a Redis of their own) running as processes
// against a test API server: what the controllers write status and emit events through.
type Writers struct {
	StatusAddr, EventsAddr string
	// BinDir holds the service binaries built so far; BuildService(BinDir, name) adds more.
	BinDir string
	stop   []func()
}

// StartWriters builds status-writer, event-emitter and the extra services named into a fresh
// directory, and starts the first two against k.
func StartWriters(k *Kube, extra ...string) (*Writers, error) {
	dir, err := os.MkdirTemp("", "agentplane-writers-")
	if err != nil {
		return nil, err
	}
	w := &Writers{BinDir: dir, stop: []func(){func() { _ = os.RemoveAll(dir) }}}
	fail := func(err error) (*Writers, error) {
		w.Stop()
		return nil, err
	}
	for _, name := range append([]string{"status-writer", "event-emitter"}, extra...) {
		if _, err := BuildService(dir, name); err != nil {
			return fail(err)
		}
	}
	redis, err := StartRedis()
	if err != nil {
		return fail(err)
	}
	w.stop = append(w.stop, func() { _ = redis.Close() })
	common := []string{"KUBECONFIG=" + k.Kubeconfig, "POD_NAMESPACE=default"}
	sw, err := StartService(dir+"/status-writer", dir, common...)
	if err != nil {
		return fail(err)
	}
	w.stop = append(w.stop, sw.Stop)
	ev, err := StartService(dir+"/event-emitter", dir, append(common, "JANGAR_REDIS_URL=redis://"+redis.Addr+"/0")...)
	if err != nil {
		return fail(err)
	}
	w.stop = append(w.stop, ev.Stop)
	w.StatusAddr, w.EventsAddr = sw.GRPCAddr, ev.GRPCAddr
	return w, nil
}

// Stop stops what StartWriters started, newest first, and removes the binaries.
func (w *Writers) Stop() {
	for i := len(w.stop) - 1; i >= 0; i-- {
		w.stop[i]()
	}
	w.stop = nil
}

// FinishJob plays the Job controller on an API server that has none: the Job completes, or
// fails with BackoffLimitExceeded.
func FinishJob(t testing.TB, kc kubernetes.Interface, ns, name string, succeed bool) {
	t.Helper()
	ctx := context.Background()
	Eventually(t, 10*time.Second, "finish Job "+name, func() error {
		j, err := kc.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		start := metav1.NewTime(now.Add(-time.Second))
		j.Status.StartTime = &start
		j.Status.Active = 0
		j.Status.Ready = ptr.To[int32](0)
		j.Status.Terminating = ptr.To[int32](0)
		j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
		if succeed {
			j.Status.Succeeded = 1
			j.Status.CompletionTime = &now
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "CompletionsReached"},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "CompletionsReached"},
			}
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
			}
		}
		_, err = kc.BatchV1().Jobs(ns).UpdateStatus(ctx, j, metav1.UpdateOptions{})
		return err
	})
}

// Metric sums the samples of a counter, gauge or histogram (its count) in g whose labels
// include the given name/value pairs.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.GetCounter() != nil:
					total += m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					total += m.GetGauge().GetValue()
				case m.GetHistogram() != nil:
					total += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return total
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
