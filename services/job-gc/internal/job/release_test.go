package job

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/jobresult"
)

// A Job whose hold this process released is not released again while the cache still shows the
// hold (the cache lags the release by a moment, and such a second release only fails: its JSON
// patch tests a finalizer that is gone); once releasedFor has passed, a hold the cache still
// shows is released again. The cache here never sees the release, as a lagging one has not yet.
func TestAJobReleasedOnceIsNotReleasedAgainFromALaggingCache(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	finished := metav1.NewTime(now.Add(-time.Minute))
	run := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "run", Namespace: "ns", UID: "run-uid"},
		Status: agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseSucceeded, FinishedAt: &finished}}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "run-job", Namespace: "ns", UID: "job-uid", Finalizers: []string{agentsv1alpha1.FinalizerJobResult},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Name: "run", UID: "run-uid", Controller: ptr.To(true)}}}}
	kube := fake.NewClientset(j.DeepCopy())
	jobs := cache.NewSharedIndexInformer(&cache.ListWatch{}, &batchv1.Job{}, 0, cache.Indexers{})
	runs := cache.NewSharedIndexInformer(&cache.ListWatch{}, &agentsv1alpha1.AgentRun{}, 0, cache.Indexers{})
	if err := jobs.GetStore().Add(j); err != nil {
		t.Fatal(err)
	}
	if err := runs.GetStore().Add(run); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Jobs: map[string]cache.SharedIndexInformer{"ns": jobs}, Runs: map[string]cache.SharedIndexInformer{"ns": runs},
		Kube: kube, Now: func() time.Time { return now }, HoldWarning: time.Hour,
		Released: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "released"}, []string{"why"})}
	patches := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "patch" {
				n++
			}
		}
		return n
	}
	for i := range 3 {
		if err := r.Reconcile(context.Background(), "ns/run-job"); err != nil {
			t.Fatalf("reconcile %d: %v", i+1, err)
		}
	}
	if got := patches(); got != 1 {
		t.Fatalf("%d release patches from three reconciles of a cache that still shows the hold, want 1", got)
	}
	live, err := kube.BatchV1().Jobs("ns").Get(context.Background(), "run-job", metav1.GetOptions{})
	if err != nil || jobresult.Index(live) >= 0 {
		t.Fatalf("the Job's hold not released: %v %v", err, live.Finalizers)
	}
	now = now.Add(releasedFor)
	_ = r.Reconcile(context.Background(), "ns/run-job") // the patch's test fails: the hold is gone
	if got := patches(); got != 2 {
		t.Errorf("%d release patches once releasedFor had passed, want 2: the record hides a hold the cache shows for good", got)
	}
	r.Forget(j.UID)
	if r.releasedLately(j.UID) {
		t.Error("the Job's release still remembered after Forget")
	}
}
