//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestFinishedOrchestrationRunsGoWithTheirStepsAfterTheirRetention (#32 item 3): of 200 finished
// OrchestrationRuns, each with two step AgentRuns (owned by it, as run-controller makes them) and a
// held Job per step, the 100 with spec.ttlSecondsAfterFinished 2 are deleted with every step run
// and every Job, no sooner than 2 s after they finished, by job-gc alone (envtest runs no garbage
// collector); the 100 without it (retention 1h) and an unfinished one keep everything.
func TestFinishedOrchestrationRunsGoWithTheirStepsAfterTheirRetention(t *testing.T) {
	const n = 200
	f := start(t, defaults()) // retentions 1h
	orc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	// orchRun creates an OrchestrationRun, its two steps and their Jobs, and finishes it (unless
	// running); it returns when it finished.
	orchRun := func(name string, ttl *int32, running bool) time.Time {
		or := &orchv1alpha1.OrchestrationRun{
			TypeMeta:   metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
			Spec:       orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "o"}, TTLSecondsAfterFinished: ttl},
		}
		if err := orc.Post().Namespace(f.ns).Resource("orchestrationruns").Body(or).Do(context.Background()).Into(or); err != nil {
			t.Error(err)
			return time.Time{}
		}
		for _, s := range []string{"a", "b"} {
			ar := f.run(name+"-"+s, func(ar *agentsv1alpha1.AgentRun) {
				ar.OwnerReferences = []metav1.OwnerReference{{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun",
					Name: name, UID: or.UID, Controller: ptr.To(true)}}
			})
			f.job(name+"-"+s+"-job", ar, nil)
		}
		if running {
			return time.Time{}
		}
		now := metav1.Now()
		or.Status = orchv1alpha1.OrchestrationRunStatus{Phase: "Succeeded", FinishedAt: &now, ObservedGeneration: or.Generation}
		if err := orc.Put().Namespace(f.ns).Resource("orchestrationruns").Name(name).SubResource("status").Body(or).Do(context.Background()).Into(or); err != nil {
			t.Error(err)
		}
		return or.Status.FinishedAt.Time // the API server keeps it to the second
	}
	finishedAt := make([]time.Time, n)
	testenv.Parallel(t, n, 16, func(i int) error {
		var ttl *int32
		if i%2 == 0 {
			ttl = ptr.To[int32](2)
		}
		finishedAt[i] = orchRun(fmt.Sprintf("or-%03d", i), ttl, false)
		return nil
	})
	orchRun("running", ptr.To[int32](0), true)
	gone := func(what string, err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s still there (%v)", what, err)
	}
	testenv.Eventually(t, 90*time.Second, "the 100 short OrchestrationRuns gone with their steps and Jobs", func() error {
		for i := 0; i < n; i += 2 {
			name := fmt.Sprintf("or-%03d", i)
			if err := gone("OrchestrationRun "+name, orc.Get().Namespace(f.ns).Resource("orchestrationruns").Name(name).Do(context.Background()).Error()); err != nil {
				return err
			}
			for _, s := range []string{"a", "b"} {
				if _, err := f.getRun(name + "-" + s); !apierrors.IsNotFound(err) {
					return fmt.Errorf("step run %s-%s still there (%v)", name, s, err)
				}
				if err := f.jobGone(name + "-" + s + "-job"); err != nil {
					return err
				}
			}
		}
		return nil
	})
	// None went early: the deletions were seen after each one's retention had passed.
	for i := 0; i < n; i += 2 {
		if seen := time.Since(finishedAt[i]); seen < 2*time.Second {
			t.Errorf("or-%03d deleted %s after finishing, before its 2s retention", i, seen)
		}
	}
	for _, name := range []string{"or-001", "or-101", "or-199", "running"} {
		if err := orc.Get().Namespace(f.ns).Resource("orchestrationruns").Name(name).Do(context.Background()).Error(); err != nil {
			t.Errorf("OrchestrationRun %s, within its retention or unfinished, was deleted: %v", name, err)
		}
		for _, s := range []string{"a", "b"} {
			if _, err := f.getRun(name + "-" + s); err != nil {
				t.Errorf("step run %s-%s was deleted: %v", name, s, err)
			}
			if err := f.jobGone(name + "-" + s + "-job"); err == nil {
				t.Errorf("step Job %s-%s-job was deleted", name, s)
			}
		}
	}
	for kind, want := range map[string]float64{"OrchestrationRun": n / 2, "AgentRun": n, "Job": n} {
		if got := f.metric("agentplane_job_gc_deletions_total", "kind", kind); got != want {
			t.Errorf("%s deletions = %v, want %v", kind, got, want)
		}
	}
	if got := f.metric("agentplane_job_gc_orchestrationrun_retention_seconds"); got != 3600 {
		t.Errorf("retention gauge = %v, want 3600", got)
	}
}
