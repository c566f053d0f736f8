//go:build integration

package wiring

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	watchapi "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// The real parts every test here runs against: kube-apiserver + etcd with the CRDs, Redis, and
// the status-writer and event-emitter binaries built from this checkout. There is no Job
// controller or kubelet: tests play them (fakePodRunning, finishJob), writing what they would
// through the same API.
var (
	env      *testenv.Kube
	kc       kubernetes.Interface
	binDir   string
	swAddr   string
	evAddr   string
	nsSerial atomic.Int32
)

func TestMain(m *testing.M) { os.Exit(testenv.NoLeaks(runMain(m))) }

func runMain(m *testing.M) int {
	var err error
	if env, err = testenv.StartKube(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	kc = env.Client
	w, err := testenv.StartWriters(env, "run-controller")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer w.Stop()
	binDir, swAddr, evAddr = w.BinDir, w.StatusAddr, w.EventsAddr
	return m.Run()
}

// namespace makes a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("rc-%d", nsSerial.Add(1))
	_, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// startController runs the controller in this process for ns until the test ends.
func startController(t *testing.T, ns string, mod func(*core.Config)) *Controller {
	t.Helper()
	cfg := core.Config{Namespaces: []string{ns}, JobTTLSeconds: 600, JobFinalizer: true, Workers: 4}
	if mod != nil {
		mod(&cfg)
	}
	rc := *env.Config
	kubeclient.Instrument(&rc)
	md, err := metadata.NewForConfig(&rc)
	if err != nil {
		t.Fatal(err)
	}
	sw, ev := writerClients(t)
	c, err := New(cfg, Deps{Kube: kc, Metadata: md, REST: &rc, Status: sw, Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	rec := testenv.NewReconciles()
	c.observe = rec.Observe
	reconciles.Store(c, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	return c
}

// writerClients are the controller's clients of the test's status-writer and event-emitter,
// closed when the test ends (after whatever the test stops in its own cleanups).
func writerClients(t *testing.T) (*statusclient.Client, *eventclient.Client) {
	t.Helper()
	sw, err := statusclient.New(swAddr, "run-controller", statusclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	ev, err := eventclient.New(evAddr, "run-controller", "test", eventclient.Options{RetryFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ev.Close() })
	return sw, ev
}

// reconciles holds each started controller's record of its reconciles.
var reconciles sync.Map // *Controller -> *testenv.Reconciles

// settle waits until c has reconciled each named object of kind ("AgentRun" or
// "OrchestrationRun") in a reconcile that began after this call, so it acted on everything its
// cache held by then. A test asserts "nothing happened" after it, instead of after a sleep.
func settle(t *testing.T, c *Controller, kind, ns string, names ...string) {
	t.Helper()
	v, _ := reconciles.Load(c)
	rec := v.(*testenv.Reconciles)
	q := c.runQ
	if kind == "OrchestrationRun" {
		q = c.orchQ
	}
	for _, name := range names {
		key := kind + "/" + ns + "/" + name
		mark := rec.Mark(key)
		q.Add(ns + "/" + name)
		rec.AwaitAfter(t, key, mark, time.Minute)
	}
}

// cached waits until c's cache of AgentRuns holds ns/name in phase.
func cached(t *testing.T, c *Controller, ns, name, phase string) {
	t.Helper()
	// A reconcile observed first orders this goroutine after Run's filling of c.runs (for the
	// race detector: the hook's mutex is the synchronisation).
	settle(t, c, "AgentRun", ns, name)
	testenv.Eventually(t, 30*time.Second, "the controller's cache has "+name+" "+phase, func() error {
		obj, ok, err := c.Runs[ns].GetIndexer().GetByKey(ns + "/" + name)
		if err != nil || !ok {
			return fmt.Errorf("not cached: %v", err)
		}
		if got := obj.(*agentsv1alpha1.AgentRun).Status.Phase; got != phase {
			return fmt.Errorf("cached in phase %q", got)
		}
		return nil
	})
}

// Objects.

func createAgent(t *testing.T, ns, name string, mod func(*agentsv1alpha1.Agent)) {
	t.Helper()
	a := &agentsv1alpha1.Agent{
		TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "Agent"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: agentsv1alpha1.AgentSpec{ProviderRef: agentsv1alpha1.LocalRef{Name: "codex-runner"},
			Defaults: &agentsv1alpha1.AgentRunDefaults{Image: "registry.example.com/agents/codex:1.0", TimeoutSeconds: 3600, RetryLimit: 2}},
	}
	if mod != nil {
		mod(a)
	}
	create(t, "agents", ns, a)
}

func jobRun(ns, name, agent string) *agentsv1alpha1.AgentRun {
	return &agentsv1alpha1.AgentRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: agent},
			Runtime: agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob}},
	}
}

// create posts an agentplane object.
func create(t *testing.T, resource, ns string, obj any) {
	t.Helper()
	gv := agentsv1alpha1.GroupVersion
	if strings.HasPrefix(resource, "orchestration") {
		gv = orchv1alpha1.GroupVersion
	}
	rc, err := kubeclient.RESTClientFor(env.Config, gv)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Post().Namespace(ns).Resource(resource).Body(obj).Do(context.Background()).Error(); err != nil {
		t.Fatalf("create %s: %v", resource, err)
	}
}

func getRun(t *testing.T, ns, name string) *agentsv1alpha1.AgentRun {
	t.Helper()
	rc, _ := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	out := &agentsv1alpha1.AgentRun{}
	if err := rc.Get().Namespace(ns).Resource("agentruns").Name(name).Do(context.Background()).Into(out); err != nil {
		t.Fatalf("get AgentRun %s: %v", name, err)
	}
	return out
}

func getOrchRun(t *testing.T, ns, name string) *orchv1alpha1.OrchestrationRun {
	t.Helper()
	rc, _ := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	out := &orchv1alpha1.OrchestrationRun{}
	if err := rc.Get().Namespace(ns).Resource("orchestrationruns").Name(name).Do(context.Background()).Into(out); err != nil {
		t.Fatalf("get OrchestrationRun %s: %v", name, err)
	}
	return out
}

func waitPhase(t *testing.T, ns, name, phase string, timeout time.Duration) *agentsv1alpha1.AgentRun {
	t.Helper()
	var ar *agentsv1alpha1.AgentRun
	testenv.Eventually(t, timeout, "AgentRun "+name+" "+phase, func() error {
		ar = getRun(t, ns, name)
		if ar.Status.Phase != phase {
			return fmt.Errorf("phase %q reason %q message %q", ar.Status.Phase, ar.Status.Reason, ar.Status.Message)
		}
		return nil
	})
	return ar
}

// waitOrchPhase waits until the OrchestrationRun is in phase and returns it as then read.
func waitOrchPhase(t *testing.T, ns, name, phase string, timeout time.Duration) *orchv1alpha1.OrchestrationRun {
	t.Helper()
	var or *orchv1alpha1.OrchestrationRun
	testenv.Eventually(t, timeout, "OrchestrationRun "+name+" "+phase, func() error {
		or = getOrchRun(t, ns, name)
		if or.Status.Phase != phase {
			return fmt.Errorf("%+v", or.Status)
		}
		return nil
	})
	return or
}

func jobsIn(t *testing.T, ns string) []batchv1.Job {
	t.Helper()
	l, err := kc.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func waitJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	var j *batchv1.Job
	testenv.Eventually(t, 20*time.Second, "Job "+name, func() (err error) {
		j, err = kc.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err
	})
	return j
}

// The Job controller's and kubelet's parts.

// fakePodRunning creates a Running pod for the Job, as the Job controller and a kubelet would.
func fakePodRunning(t *testing.T, j *batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-pod", Namespace: j.Namespace, Labels: j.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}}},
		Spec: j.Spec.Template.Spec,
	}
	p, err := kc.CoreV1().Pods(j.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := kc.CoreV1().Pods(j.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// finishJob sets a Job's final conditions as the Job controller does.
func finishJob(t *testing.T, ns, name string, succeed bool) {
	t.Helper()
	testenv.FinishJob(t, kc, ns, name, succeed)
}

// eventsFor lists the events about an object (events.k8s.io/v1, as event-emitter writes them).
func eventsFor(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	l, err := kc.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "regarding.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func waitEvent(t *testing.T, ns, name, typ, reason string) eventsv1.Event {
	t.Helper()
	var ev eventsv1.Event
	testenv.Eventually(t, 15*time.Second, fmt.Sprintf("%s event %s on %s", typ, reason, name), func() error {
		for _, e := range eventsFor(t, ns, name) {
			if e.Type == typ && e.Reason == reason {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	return ev
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func metav1TypeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: kind}
}

func objectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns}
}

// watchAll watches every version of the objects of resource (group version gv) in ns from now
// until ctx ends or the test does.
func watchAll(ctx context.Context, t *testing.T, ns string, gv schema.GroupVersion, resource string) <-chan watchapi.Event {
	t.Helper()
	rc, err := kubeclient.RESTClientFor(env.Config, gv)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rc.Get().Namespace(ns).Resource(resource).VersionedParams(&metav1.ListOptions{Watch: true}, metav1.ParameterCodec).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w.ResultChan()
}

// watched is the object of a watch event received with ok; the test fails when the watch ended
// (soFar, what it saw until then, in the message) or sent something other than a T.
func watched[T any](t *testing.T, ev watchapi.Event, ok bool, soFar any) T {
	t.Helper()
	if !ok {
		t.Fatalf("the watch ended; so far: %v", soFar)
	}
	obj, is := ev.Object.(T)
	if !is {
		t.Fatalf("watch event %s: %T %v", ev.Type, ev.Object, ev.Object)
	}
	return obj
}
