//go:build integration

package wiring

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/testenv"
)

// A cancelled OrchestrationRun's steps are stopped and written Cancelled by the OrchestrationRun's
// passes: each step's status changes once, straight to Cancelled (no CancelRequested of its own),
// only once its pods have stopped, and no event is emitted about a step; the OrchestrationRun is
// Cancelled after its last step.
func TestStepsAreWrittenCancelledOnceByTheirOrchestrationRun(t *testing.T) {
	f := newFixture(t)
	steps := []string{"three-a", "three-b", "three-c"}
	for _, ar := range f.orchestrationRun("three", steps...) {
		name := ar.Name
		j := f.job(name+"-job", ar)
		f.pod(name+"-pod", j, "test/stopping") // held until released: the pod still stops
		f.setARStatus(name, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: j.Name, Namespace: f.ns, UID: string(j.UID)}})
	}

	// Every status each step shows from here on, as "<phase> <condition>".
	runs := versioned.NewForConfigOrDie(env.Config).AgentsV1alpha1().AgentRuns(f.ns)
	l, err := runs.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	for _, ar := range l.Items {
		seen[ar.Name] = []string{ar.Status.Phase + " " + condOf(ar.Status.Conditions)}
	}
	w, err := runs.Watch(context.Background(), metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for e := range w.ResultChan() {
			ar, ok := e.Object.(*agentsv1alpha1.AgentRun)
			if !ok || e.Type != watch.Modified {
				continue
			}
			st := ar.Status.Phase + " " + condOf(ar.Status.Conditions)
			mu.Lock()
			if h := seen[ar.Name]; h[len(h)-1] != st {
				seen[ar.Name] = append(h, st)
			}
			mu.Unlock()
		}
	}()

	f.start(Config{Enabled: true, Timeout: time.Minute})
	f.cancel("orchestrationruns", "three")
	testenv.Eventually(t, 30*time.Second, "every step cancelled, its Job and pod deleted", func() error {
		for _, name := range steps {
			ar, err := f.getAR(name)
			if err != nil {
				return err
			}
			// The Job has no finalizer here: its deletion removes it at once.
			j, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), name+"-job", metav1.GetOptions{})
			if err == nil && j.DeletionTimestamp == nil {
				return fmt.Errorf("%s: Job not deleted", name)
			} else if err != nil && !gone(err) {
				return err
			}
			pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), name+"-pod", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !ar.Spec.Cancel || pod.DeletionTimestamp == nil {
				return fmt.Errorf("%s: cancel=%v, pod deleting=%v", name, ar.Spec.Cancel, pod.DeletionTimestamp != nil)
			}
		}
		return nil
	})
	// A step whose pod still stops is not Cancelled; one whose pod is gone is.
	f.releasePod("three-a-pod")
	testenv.Eventually(t, 30*time.Second, "three-a Cancelled", func() error {
		ar, err := f.getAR("three-a")
		if err != nil || ar.Status.Phase != "Cancelled" {
			return fmt.Errorf("%v %+v", err, ar.Status)
		}
		return nil
	})
	for _, name := range []string{"three-b", "three-c"} {
		if ar, _ := f.getAR(name); ar.Status.Phase == "Cancelled" {
			t.Errorf("%s Cancelled while its pod still stops", name)
		}
	}
	if or, _ := f.getOR("three"); or.Status.Phase == "Cancelled" {
		t.Fatalf("the OrchestrationRun Cancelled while two steps' pods still stop")
	}
	f.releasePod("three-b-pod")
	f.releasePod("three-c-pod")
	testenv.Eventually(t, 30*time.Second, "the OrchestrationRun Cancelled", func() error {
		or, err := f.getOR("three")
		if err != nil || or.Status.Phase != "Cancelled" {
			return fmt.Errorf("%v %+v", err, or.Status)
		}
		return nil
	})
	time.Sleep(time.Second) // the watch delivers what it has; a late write would show here
	for _, name := range steps {
		ar, err := f.getAR(name)
		if err != nil {
			t.Fatal(err)
		}
		want := "cancelled with its OrchestrationRun three; stopped 1 Job(s), 1 Pod(s)"
		if ar.Status.Phase != "Cancelled" || condOf(ar.Status.Conditions) != "True/Cancelled" || ar.Status.Message != want || ar.Status.FinishedAt == nil {
			t.Errorf("%s: phase %s, condition %s, message %q (want %q), finishedAt %v", name, ar.Status.Phase, condOf(ar.Status.Conditions), ar.Status.Message, want, ar.Status.FinishedAt)
		}
		mu.Lock()
		h := strings.Join(seen[name], " -> ")
		mu.Unlock()
		if h != "Running none -> Cancelled True/Cancelled" {
			t.Errorf("%s's statuses: %s; want one write, Running none -> Cancelled True/Cancelled", name, h)
		}
		if ev := f.events(name); len(ev) > 0 {
			t.Errorf("%s has events %v; want none (the OrchestrationRun's say what was stopped)", name, ev)
		}
	}
	if or, _ := f.getOR("three"); !strings.Contains(or.Status.Message, "stopped 3 AgentRun(s)") {
		t.Errorf("the OrchestrationRun's message: %q", or.Status.Message)
	}
	if got := f.metric("agentplane_cancel_propagator_cancels_total", "kind", "AgentRun", "outcome", "Cancelled"); got != 3 {
		t.Errorf("AgentRun cancels counted = %v, want 3", got)
	}
}

// slowPatches holds up every PATCH of an AgentRun for delay on its way to the API server.
type slowPatches struct {
	rt    http.RoundTripper
	delay time.Duration
}

func (s slowPatches) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/agentruns/") {
		select {
		case <-time.After(s.delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return s.rt.RoundTrip(req)
}

// A cancelled OrchestrationRun's pass does not wait for a step's spec.cancel patch before it
// deletes the step's Job and pod: with that patch held up for 15 s on its way to the API server,
// the Job and the pod have their deletion requested while the step's spec.cancel is still unset.
// The step still gets spec.cancel, and is written Cancelled once its pod has stopped.
func TestAStepsJobIsDeletedWithoutWaitingForItsCancelPatch(t *testing.T) {
	f := newFixture(t)
	ar := f.orchestrationRun("one", "one-a")[0]
	j := f.job("one-a-job", ar)
	var err error
	// run-controller's job-result finalizer, as on every Job it creates: the Job outlives its
	// deletion, so its pods are deleted at once rather than left to the garbage collector.
	if j, err = env.Client.BatchV1().Jobs(f.ns).Patch(context.Background(), j.Name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["`+agentsv1alpha1.FinalizerJobResult+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.pod("one-a-pod", j, "test/stopping")
	f.setARStatus("one-a", agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: j.Name, Namespace: f.ns, UID: string(j.UID)}})

	f.rest = rest.CopyConfig(env.Config)
	f.rest.Wrap(func(rt http.RoundTripper) http.RoundTripper { return slowPatches{rt: rt, delay: 15 * time.Second} })
	f.start(Config{Enabled: true, Timeout: time.Minute})
	f.cancel("orchestrationruns", "one")
	testenv.Eventually(t, 12*time.Second, "the step's Job and pod deleted before its spec.cancel is set", func() error {
		pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), "one-a-pod", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.DeletionTimestamp == nil {
			return fmt.Errorf("pod not deleted yet")
		}
		jb, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), "one-a-job", metav1.GetOptions{})
		if err == nil && jb.DeletionTimestamp == nil {
			return fmt.Errorf("Job not deleted yet")
		} else if err != nil && !gone(err) {
			return err
		}
		return nil
	})
	if ar, err := f.getAR("one-a"); err != nil || ar.Spec.Cancel {
		t.Fatalf("the step's spec.cancel was set before its Job and pod were deleted (err %v): the pass waited for the patch", err)
	}
	f.releasePod("one-a-pod")
	testenv.Eventually(t, 45*time.Second, "the step and its OrchestrationRun Cancelled", func() error {
		ar, err := f.getAR("one-a")
		if err != nil || ar.Status.Phase != "Cancelled" || !ar.Spec.Cancel {
			return fmt.Errorf("step: %v %+v cancel=%v", err, ar.Status, ar.Spec.Cancel)
		}
		or, err := f.getOR("one")
		if err != nil || or.Status.Phase != "Cancelled" {
			return fmt.Errorf("OrchestrationRun: %v %+v", err, or.Status)
		}
		return nil
	})
}
