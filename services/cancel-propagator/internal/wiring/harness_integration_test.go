//go:build integration

package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

var (
	env            *testenv.Kube
	swAddr, evAddr string
	binDir         string
	nsSerial       atomic.Int32
)

func TestMain(m *testing.M) { os.Exit(testenv.NoLeaks(runMain(m))) }

// runMain starts a real API server, Redis, status-writer and event-emitter, and builds
// run-controller and cancel-propagator for the tests that run them as processes.
func runMain(m *testing.M) int {
	var err error
	if env, err = testenv.StartKube(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	w, err := testenv.StartWriters(env, "run-controller", "cancel-propagator")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer w.Stop()
	binDir, swAddr, evAddr = w.BinDir, w.StatusAddr, w.EventsAddr
	return m.Run()
}

type fixture struct {
	t        *testing.T
	ns       string
	agents   *rest.RESTClient
	orch     *rest.RESTClient
	reg      *prometheus.Registry
	p        *Propagator
	rec      *testenv.Reconciles
	stopProp func()
	// rest, when set, is the config cancel-propagator's clientset of the agentplane API groups
	// uses instead of env.Config.
	rest *rest.Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := fmt.Sprintf("cancel-%d", nsSerial.Add(1))
	if _, err := env.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agents, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	orch, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ns: ns, agents: agents, orch: orch}
}

// start runs cancel-propagator in this process until stopProp or the test's end.
func (f *fixture) start(cfg Config) {
	f.t.Helper()
	sw, err := statusclient.New(swAddr, "cancel-propagator", statusclient.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	ev, err := eventclient.New(evAddr, "cancel-propagator", "test", eventclient.Options{RetryFor: 5 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.Namespaces = []string{f.ns}
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	f.reg = prometheus.NewRegistry()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	restCfg := env.Config
	if f.rest != nil {
		restCfg = f.rest
	}
	p, err := New(cfg, Deps{Kube: env.Client, Dynamic: dyn, REST: restCfg, Status: sw, Events: ev, Registry: f.reg})
	if err != nil {
		f.t.Fatal(err)
	}
	f.p = p
	f.rec = testenv.NewReconciles()
	p.observe = f.rec.Observe
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	f.stopProp = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("cancel-propagator: %v", err)
		}
		sw.Close()
		ev.Close()
	}
	f.t.Cleanup(f.stopProp)
}

// runController runs the run-controller binary for the fixture's namespace until the test ends.
func (f *fixture) runController() *testenv.Service {
	f.t.Helper()
	rc, err := testenv.StartService(binDir+"/run-controller", binDir, "KUBECONFIG="+env.Kubeconfig, "POD_NAMESPACE="+f.ns,
		"JANGAR_AGENTS_CONTROLLER_NAMESPACES="+f.ns, "JANGAR_STATUS_WRITER_ADDR="+swAddr, "JANGAR_EVENT_EMITTER_ADDR="+evAddr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(rc.Stop)
	return rc
}

// kubectl runs the pinned kubectl against the test API server.
func (f *fixture) kubectl(args ...string) (string, error) {
	out, errOut, err := env.RunKubectl(context.Background(), args...)
	return out + errOut, err
}

func (f *fixture) apply(manifest string) {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), "m.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		f.t.Fatal(err)
	}
	if out, err := f.kubectl("apply", "-n", f.ns, "-f", file); err != nil {
		f.t.Fatalf("apply: %v\n%s", err, out)
	}
}

func (f *fixture) getAR(name string) (*agentsv1alpha1.AgentRun, error) {
	ar := &agentsv1alpha1.AgentRun{}
	return ar, f.agents.Get().Namespace(f.ns).Resource("agentruns").Name(name).Do(context.Background()).Into(ar)
}

func (f *fixture) getOR(name string) (*orchv1alpha1.OrchestrationRun, error) {
	or := &orchv1alpha1.OrchestrationRun{}
	return or, f.orch.Get().Namespace(f.ns).Resource("orchestrationruns").Name(name).Do(context.Background()).Into(or)
}

// cancel sets spec.cancel with the seed's merge patch and returns the resourceVersion it made.
// settle waits until the propagator has handled the named run of kind ("OrchestrationRun" or
// "AgentRun") in a pass that began after this call, so a test can then assert that nothing
// (more) happened instead of sleeping.
func (f *fixture) settle(kind, name string) {
	f.t.Helper()
	k := cancel.Key(kind, f.ns, name)
	mark := f.rec.Mark(k)
	f.p.enqueue(k)
	f.rec.AwaitAfter(f.t, k, mark, time.Minute)
}

func (f *fixture) cancel(resource, name string) int64 {
	f.t.Helper()
	c := f.agents
	if resource == "orchestrationruns" {
		c = f.orch
	}
	var out metav1.PartialObjectMetadata
	raw, err := c.Patch("application/merge-patch+json").Namespace(f.ns).Resource(resource).Name(name).Body([]byte(`{"spec":{"cancel":true}}`)).Do(context.Background()).Raw()
	if err != nil {
		f.t.Fatalf("cancel %s %s: %v", resource, name, err)
	}
	if err := jsonUnmarshal(raw, &out); err != nil {
		f.t.Fatal(err)
	}
	return rv(out.ResourceVersion)
}

// setARStatus plays run-controller for a standalone run: it writes the status directly.
func (f *fixture) setARStatus(name string, st agentsv1alpha1.AgentRunStatus) {
	f.t.Helper()
	testenv.Eventually(f.t, 10*time.Second, "write "+name+"'s status", func() error {
		ar, err := f.getAR(name)
		if err != nil {
			return err
		}
		ar.Status = st
		ar.Status.ObservedGeneration = ar.Generation
		return f.agents.Put().Namespace(f.ns).Resource("agentruns").Name(name).SubResource("status").Body(ar).Do(context.Background()).Error()
	})
}

// job creates a Job the way run-controller does, owned by the run and labelled with its name
// (and its OrchestrationRun's, for a step).
func (f *fixture) job(name string, ar *agentsv1alpha1.AgentRun) *batchv1.Job {
	f.t.Helper()
	labels := map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController, agentsv1alpha1.LabelAgentRun: agentsv1alpha1.LabelValue(ar.Name)}
	if v := ar.Labels[agentsv1alpha1.LabelOrchestrationRun]; v != "" {
		labels[agentsv1alpha1.LabelOrchestrationRun] = v
	}
	j, err := env.Client.BatchV1().Jobs(f.ns).Create(context.Background(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Name: ar.Name, UID: ar.UID, Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

// orchestrationRun creates the OrchestrationRun called name and, for each of steps, a step
// AgentRun of that name owned by it and labelled with its name, and returns the steps.
func (f *fixture) orchestrationRun(name string, steps ...string) []*agentsv1alpha1.AgentRun {
	f.t.Helper()
	f.apply(fmt.Sprintf(`{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","metadata":{"name":%q},"spec":{"orchestrationRef":{"name":"plan"}}}`, name))
	or, err := f.getOR(name)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []*agentsv1alpha1.AgentRun
	for _, step := range steps {
		f.apply(fmt.Sprintf(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":%q,
			"labels":{%q:%q},
			"ownerReferences":[{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","name":%q,"uid":%q,"controller":true}]},
			"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`, step, agentsv1alpha1.LabelOrchestrationRun, name, name, or.UID))
		ar, err := f.getAR(step)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, ar)
	}
	return out
}

// runningAgentRun creates the AgentRun called name, Running, with a Job name+"-job" and a running
// pod name+"-pod" of it (held by podFinalizer).
func (f *fixture) runningAgentRun(name, podFinalizer string) (*agentsv1alpha1.AgentRun, *batchv1.Job) {
	f.t.Helper()
	f.apply(fmt.Sprintf(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":%q},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`, name))
	ar, err := f.getAR(name)
	if err != nil {
		f.t.Fatal(err)
	}
	j := f.job(name+"-job", ar)
	f.pod(name+"-pod", j, podFinalizer)
	f.setARStatus(name, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: j.Name, Namespace: f.ns, UID: string(j.UID)}})
	return ar, j
}

// pod creates a running pod of the Job, with the Job's labels; with a finalizer it outlives its
// deletion until released.
func (f *fixture) pod(name string, j *batchv1.Job, finalizer string) {
	f.t.Helper()
	labels := map[string]string{batchv1.ControllerUidLabel: string(j.UID)}
	for k, v := range j.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	if finalizer != "" {
		pod.Finalizers = []string{finalizer}
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) releasePod(name string) {
	f.t.Helper()
	if _, err := env.Client.CoreV1().Pods(f.ns).Patch(context.Background(), name, "application/json-patch+json",
		[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// events lists "<type>/<reason>" of the events about the object called name.
func (f *fixture) events(name string) []string {
	f.t.Helper()
	l, err := env.Client.EventsV1().Events(f.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "regarding.name=" + name})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Type+"/"+e.Reason)
	}
	return out
}

func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	return testenv.Metric(f.t, f.reg, name, labels...)
}

func condOf(conds []metav1.Condition) string {
	c := meta.FindStatusCondition(conds, cancel.CondCancelled)
	if c == nil {
		return "none"
	}
	return string(c.Status) + "/" + c.Reason
}

func gone(err error) bool { return apierrors.IsNotFound(err) }

func contains(list []string, s string) bool { return strings.Contains(strings.Join(list, ","), s) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func rv(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// applyCluster applies cluster-scoped objects (a CRD) and waits until they are established.
func (f *fixture) applyCluster(manifest string) {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		f.t.Fatal(err)
	}
	if out, err := f.kubectl("apply", "-f", file); err != nil {
		f.t.Fatalf("apply: %v\n%s", err, out)
	}
	if out, err := f.kubectl("wait", "--for", "condition=Established", "--timeout", "30s", "-f", file); err != nil {
		f.t.Fatalf("wait: %v\n%s", err, out)
	}
}

// releaseWorkflow removes the test's finalizer from a Workflow, as Argo's controller would once stopped.
func (f *fixture) releaseWorkflow(name string) {
	f.t.Helper()
	_, err := dynamic.NewForConfigOrDie(env.Config).Resource(cancel.WorkflowGVR).Namespace(f.ns).Patch(context.Background(), name,
		"application/json-patch+json", []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
}

// finishJob plays the Job controller: the Job completes.
func (f *fixture) finishJob(name string) {
	f.t.Helper()
	testenv.FinishJob(f.t, env.Client, f.ns, name, true)
}
