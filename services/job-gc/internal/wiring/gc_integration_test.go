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

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/job-gc/internal/agentrun"
	"github.com/agentplane/agentplane/services/job-gc/internal/job"
)

var (
	env            *testenv.Kube
	swAddr, evAddr string
	nsSerial       atomic.Int32
)

func TestMain(m *testing.M) { os.Exit(testenv.NoLeaks(runMain(m))) }

// runMain starts a real API server, Redis, and status-writer and event-emitter binaries: job-gc
// writes status and emits events through them as it does in a cluster.
func runMain(m *testing.M) int {
	var err error
	if env, err = testenv.StartKube(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	w, err := testenv.StartWriters(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer w.Stop()
	swAddr, evAddr = w.StatusAddr, w.EventsAddr
	defer stopPostgres()
	return m.Run()
}

// fixture is one test's namespace, job-gc instance and clients.
type fixture struct {
	t   *testing.T
	ns  string
	rc  *rest.RESTClient
	reg *prometheus.Registry
	gc  *GC
	// stop ends the job-gc runGC started (the test's end does too).
	stop func()
}

// start makes a namespace and runs job-gc there with cfg (its namespaces set) until the test ends.
func start(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return startWith(t, cfg, nil)
}

// startWith is start with Deps changed by mod (the run archive, say).
func startWith(t *testing.T, cfg Config, mod func(*Deps)) *fixture {
	t.Helper()
	ns := fmt.Sprintf("gc-%d", nsSerial.Add(1))
	if _, err := env.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ns: ns, rc: rc}
	f.runGC(cfg, mod)
	return f
}

// runGC starts job-gc in f's namespace with cfg, until the test ends or stop.
func (f *fixture) runGC(cfg Config, mod func(*Deps)) {
	t := f.t
	t.Helper()
	sw, err := statusclient.New(swAddr, "job-gc", statusclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := eventclient.New(evAddr, "job-gc", "test", eventclient.Options{RetryFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Namespaces = []string{f.ns}
	reg := prometheus.NewRegistry()
	d := Deps{Kube: env.Client, REST: env.Config, Status: sw, Events: ev, Registry: reg}
	if mod != nil {
		mod(&d)
	}
	g, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(cctx) }()
	var once sync.Once
	f.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("job-gc: %v", err)
			}
			sw.Close()
			ev.Close()
			if c, ok := d.Archive.(interface{ Close() }); ok {
				c.Close()
			}
		})
	}
	t.Cleanup(f.stop)
	f.reg, f.gc = reg, g
}

func defaults() Config {
	return Config{Retention: time.Hour, OrchRetention: time.Hour, MissingGrace: time.Hour, HoldWarning: time.Hour, Workers: 2}
}

func (f *fixture) run(name string, mod func(*agentsv1alpha1.AgentRun)) *agentsv1alpha1.AgentRun {
	f.t.Helper()
	ar := &agentsv1alpha1.AgentRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}},
	}
	if mod != nil {
		mod(ar)
	}
	if err := f.rc.Post().Namespace(f.ns).Resource("agentruns").Body(ar).Do(context.Background()).Into(ar); err != nil {
		f.t.Fatal(err)
	}
	return ar
}

// setStatus plays run-controller: it writes the run's status directly (read, modify, write,
// again on a conflict with job-gc's own writes).
func (f *fixture) setStatus(ar *agentsv1alpha1.AgentRun, st agentsv1alpha1.AgentRunStatus) {
	f.t.Helper()
	testenv.Eventually(f.t, 10*time.Second, "write "+ar.Name+"'s status", func() error {
		cur, err := f.getRun(ar.Name)
		if err != nil {
			return err
		}
		cur.Status = st
		cur.Status.ObservedGeneration = cur.Generation
		return f.rc.Put().Namespace(f.ns).Resource("agentruns").Name(ar.Name).SubResource("status").Body(cur).Do(context.Background()).Into(ar)
	})
}

// finishJob plays the Job controller: the Job completes.
func (f *fixture) finishJob(name string) {
	f.t.Helper()
	testenv.FinishJob(f.t, env.Client, f.ns, name, true)
}

func (f *fixture) getRun(name string) (*agentsv1alpha1.AgentRun, error) {
	ar := &agentsv1alpha1.AgentRun{}
	return ar, f.rc.Get().Namespace(f.ns).Resource("agentruns").Name(name).Do(context.Background()).Into(ar)
}

// job creates a Job the way run-controller does: labelled, owned by ar, held by the finalizer.
func (f *fixture) job(name string, ar *agentsv1alpha1.AgentRun, mod func(*batchv1.Job)) *batchv1.Job {
	f.t.Helper()
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Finalizers: []string{agentsv1alpha1.FinalizerJobResult},
			Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun",
				Name: ar.Name, UID: ar.UID, Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}
	if mod != nil {
		mod(j)
	}
	out, err := env.Client.BatchV1().Jobs(f.ns).Create(context.Background(), j, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) deleteJob(name string) {
	f.t.Helper()
	if err := env.Client.BatchV1().Jobs(f.ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) jobGone(name string) error {
	_, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("Job %s still there (%v)", name, err)
}

// events lists the reasons of the events about the object called name.
func (f *fixture) events(name string) []string {
	f.t.Helper()
	list, err := env.Client.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Type+"/"+e.Reason)
	}
	return out
}

// metric reads a counter or gauge (with the given labels) from job-gc's registry.
func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	return testenv.Metric(f.t, f.reg, name, labels...)
}

func finished(phase string) agentsv1alpha1.AgentRunStatus {
	now := metav1.Now()
	return agentsv1alpha1.AgentRunStatus{Phase: phase, FinishedAt: &now}
}

// A Job deleted by hand (or by its TTL, or a cascading delete) stays readable while its run is
// unfinished, and goes once the run's status records the outcome; a Job whose run is gone is
// released.
func TestAJobIsKeptUntilItsResultIsRecorded(t *testing.T) {
	f := start(t, defaults())
	run := f.run("r", nil)
	held := f.job("held", run, nil)
	f.job("orphan", run, func(j *batchv1.Job) {
		j.OwnerReferences[0].Name, j.OwnerReferences[0].UID = "gone-run", "00000000-0000-0000-0000-000000000000"
	})
	// A finished Job (its TTL deletes it at once, say) is not "missing" while it waits to be
	// recorded.
	f.setStatus(run, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "held", Namespace: f.ns, UID: string(held.UID)}})
	f.finishJob("held")
	f.deleteJob("held")
	f.deleteJob("orphan")
	testenv.Eventually(t, 20*time.Second, "the orphan's hold is released", func() error { return f.jobGone("orphan") })
	// The Job goes as the release's patch lands; the count follows when the patch returns.
	testenv.Eventually(t, 5*time.Second, "one release (owner gone) counted", func() error {
		if got := f.metric("agentplane_job_gc_holds_released_total", "why", job.ReleasedOwnerGone); got != 1 {
			return fmt.Errorf("released (owner gone) = %v, want 1", got)
		}
		return nil
	})
	j, err := env.Client.BatchV1().Jobs(f.ns).Get(context.Background(), "held", metav1.GetOptions{})
	if err != nil || j.DeletionTimestamp == nil {
		t.Fatalf("an unrecorded Job must stay readable while being deleted: %v %+v", err, j)
	}
	if got := f.metric("agentplane_job_gc_jobs_held"); got != 1 {
		t.Errorf("jobs held = %v, want 1", got)
	}
	if ar, err := f.getRun("r"); err != nil || meta.FindStatusCondition(ar.Status.Conditions, agentrun.CondJobMissing) != nil {
		t.Errorf("a finished Job being deleted was reported missing: %v %+v", err, ar.Status.Conditions)
	}
	st := finished("Succeeded")
	st.JobRef = &agentsv1alpha1.JobRef{Name: "held", Namespace: f.ns, UID: string(held.UID)}
	f.setStatus(run, st)
	testenv.Eventually(t, 20*time.Second, "released once the result is recorded", func() error { return f.jobGone("held") })
	// The Job goes as the release's patch lands; the count follows when the patch returns.
	testenv.Eventually(t, 5*time.Second, "one release (recorded) counted", func() error {
		if got := f.metric("agentplane_job_gc_holds_released_total", "why", job.ReleasedRecorded); got != 1 {
			return fmt.Errorf("released (recorded) = %v, want 1", got)
		}
		return nil
	})
}

// A finished run is deleted with its Jobs once spec.ttlSecondsAfterFinished has passed; one
// without it keeps the configured retention; a run of an OrchestrationRun goes with it instead.
func TestAFinishedRunIsDeletedWithItsJobsAfterItsRetention(t *testing.T) {
	f := start(t, defaults()) // retention 1h
	short := f.run("short", func(ar *agentsv1alpha1.AgentRun) { ar.Spec.TTLSecondsAfterFinished = ptr.To[int32](2) })
	keep := f.run("keep", nil)
	// A step run of a running OrchestrationRun goes with it, whatever its own ttl; a step run
	// whose OrchestrationRun is gone (an orphan an earlier version left forever, #32 item 8)
	// goes by its own.
	orc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	or := &orchv1alpha1.OrchestrationRun{TypeMeta: metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "or", Namespace: f.ns}, Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "o"}}}
	if err := orc.Post().Namespace(f.ns).Resource("orchestrationruns").Body(or).Do(context.Background()).Into(or); err != nil {
		t.Fatal(err)
	}
	stepOf := func(name string, uid types.UID) *agentsv1alpha1.AgentRun {
		return f.run(name, func(ar *agentsv1alpha1.AgentRun) {
			ar.Spec.TTLSecondsAfterFinished = ptr.To[int32](0)
			ar.OwnerReferences = []metav1.OwnerReference{{APIVersion: "orchestration.proompteng.ai/v1alpha1", Kind: "OrchestrationRun",
				Name: "or", UID: uid, Controller: ptr.To(true)}}
		})
	}
	child := stepOf("child", or.UID)
	orphan := stepOf("orphan", "11111111-1111-1111-1111-111111111111") // its OrchestrationRun (that UID) is gone
	f.job("short-job", short, nil)
	f.job("keep-job", keep, nil)
	for _, ar := range []*agentsv1alpha1.AgentRun{short, keep, child, orphan} {
		f.setStatus(ar, finished("Succeeded"))
	}
	// The API server keeps finishedAt to the second; the retention runs from the stored value.
	finishedAt := short.Status.FinishedAt.Time
	testenv.Eventually(t, 30*time.Second, "the short run and its Job deleted", func() error {
		if _, err := f.getRun("short"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("run still there (%v)", err)
		}
		return f.jobGone("short-job")
	})
	if seen := time.Since(finishedAt); seen < 2*time.Second {
		t.Errorf("deleted %s after its finishedAt %s, before its 2s retention", seen, finishedAt.Format(time.RFC3339Nano))
	}
	for _, name := range []string{"keep", "child"} {
		if _, err := f.getRun(name); err != nil {
			t.Errorf("run %s, within its retention, was deleted: %v", name, err)
		}
	}
	if err := f.jobGone("keep-job"); err == nil {
		t.Error("the kept run's Job was deleted")
	}
	testenv.Eventually(t, 30*time.Second, "the orphaned step run deleted by its own retention", func() error {
		if _, err := f.getRun("orphan"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("orphan still there (%v)", err)
		}
		return nil
	})
	if got := f.metric("agentplane_job_gc_deletions_total", "kind", "AgentRun"); got != 2 {
		t.Errorf("AgentRun deletions = %v, want 2 (short and the orphan)", got)
	}
	if got := f.metric("agentplane_job_gc_agentrun_retention_seconds"); got != 3600 {
		t.Errorf("retention gauge = %v, want 3600", got)
	}
}

// A run whose Job is gone (or deleted before it finished) is reported at once (condition,
// Warning event, metric) and fails with WorkflowJobMissing after the grace period; a Job that
// exists but is not in job-gc's cache is not reported, nor is the deleted Job of a step whose
// OrchestrationRun is cancelled (the step's own spec.cancel not set yet).
func TestAMissingJobIsReportedThenFailsTheRun(t *testing.T) {
	cfg := defaults()
	cfg.MissingGrace = 3 * time.Second
	f := start(t, cfg)
	lost := f.run("lost", nil)
	f.setStatus(lost, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "lost-job", Namespace: f.ns, UID: "22222222-2222-2222-2222-222222222222"}})
	killed := f.run("killed", nil)
	kj := f.job("killed-job", killed, nil)
	f.setStatus(killed, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "killed-job", Namespace: f.ns, UID: string(kj.UID)}})
	// Not labelled as run-controller's, so never in job-gc's cache: only the live GET finds it.
	late := f.run("late", nil)
	lj := f.job("late-job", late, func(j *batchv1.Job) { j.Labels = nil; j.Finalizers = nil })
	f.setStatus(late, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "late-job", Namespace: f.ns, UID: string(lj.UID)}})
	f.deleteJob("killed-job") // by hand, mid-run
	// A step of a cancelled OrchestrationRun whose Job the cancel deleted before the step's own
	// spec.cancel arrived (cancel-propagator sets both at once): not missing, cancelled.
	orc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	or := &orchv1alpha1.OrchestrationRun{TypeMeta: metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "stopping", Namespace: f.ns}, Spec: orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "o"}, Cancel: true}}
	if err := orc.Post().Namespace(f.ns).Resource("orchestrationruns").Body(or).Do(context.Background()).Into(or); err != nil {
		t.Fatal(err)
	}
	step := f.run("step", func(ar *agentsv1alpha1.AgentRun) {
		ar.OwnerReferences = []metav1.OwnerReference{{APIVersion: "orchestration.proompteng.ai/v1alpha1", Kind: "OrchestrationRun",
			Name: "stopping", UID: or.UID, Controller: ptr.To(true)}}
	})
	sj := f.job("step-job", step, nil)
	f.setStatus(step, agentsv1alpha1.AgentRunStatus{Phase: "Running", JobRef: &agentsv1alpha1.JobRef{Name: "step-job", Namespace: f.ns, UID: string(sj.UID)}})
	f.deleteJob("step-job")

	for _, name := range []string{"lost", "killed"} {
		testenv.Eventually(t, 20*time.Second, name+" reported missing its Job", func() error {
			ar, err := f.getRun(name)
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(ar.Status.Conditions, agentrun.CondJobMissing)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reasons.WorkflowJobMissing {
				return fmt.Errorf("condition %+v", c)
			}
			if ar.Status.Phase != "Running" {
				return fmt.Errorf("phase %s before the grace period passed", ar.Status.Phase)
			}
			if ev := f.events(name); !strings.Contains(strings.Join(ev, ","), "Warning/"+reasons.WorkflowJobMissing) {
				return fmt.Errorf("events %v", ev)
			}
			return nil
		})
	}
	if got := f.metric("agentplane_job_gc_missing_jobs_total", "run_namespace", f.ns); got != 2 {
		t.Errorf("missing jobs = %v, want 2", got)
	}
	for _, name := range []string{"lost", "killed"} {
		testenv.Eventually(t, 30*time.Second, name+" failed with WorkflowJobMissing", func() error {
			ar, err := f.getRun(name)
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(ar.Status.Conditions, "Succeeded")
			if ar.Status.Phase != "Failed" || ar.Status.Reason != reasons.WorkflowJobMissing || ar.Status.FinishedAt == nil ||
				c == nil || c.Status != metav1.ConditionFalse || c.Reason != reasons.WorkflowJobMissing {
				return fmt.Errorf("status %s/%s finishedAt=%v succeeded=%+v", ar.Status.Phase, ar.Status.Reason, ar.Status.FinishedAt, c)
			}
			if since := ar.Status.FinishedAt.Sub(meta.FindStatusCondition(ar.Status.Conditions, agentrun.CondJobMissing).LastTransitionTime.Time); since < 2*time.Second {
				return fmt.Errorf("failed %s after the report, within the 3s grace", since)
			}
			return nil
		})
	}
	// Its result recorded (as a failure), the killed run's Job is released and goes.
	testenv.Eventually(t, 20*time.Second, "the killed Job released once its run failed", func() error { return f.jobGone("killed-job") })
	ar, err := f.getRun("late")
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(ar.Status.Conditions, agentrun.CondJobMissing); c != nil || ar.Status.Phase != "Running" {
		t.Errorf("a Job only missing from the cache was reported: phase %s, condition %+v", ar.Status.Phase, c)
	}
	if got := f.metric("agentplane_job_gc_missing_job_failures_total", "run_namespace", f.ns); got != 2 {
		t.Errorf("missing job failures = %v, want 2", got)
	}
	if ar, err = f.getRun("step"); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(ar.Status.Conditions, agentrun.CondJobMissing); c != nil || ar.Status.Phase != "Running" {
		t.Errorf("the Job of a cancelled OrchestrationRun's step was reported missing: phase %s, condition %+v", ar.Status.Phase, c)
	}
	if ev := f.events("step"); len(ev) > 0 {
		t.Errorf("the cancelled OrchestrationRun's step has events %v", ev)
	}
}

// A deleted Job whose run does not record its outcome is still held (the result comes first),
// but past the warning bound it raises a JobResultHeld Warning and shows in the metrics.
func TestAnOverdueHoldRaisesAWarning(t *testing.T) {
	cfg := defaults()
	cfg.HoldWarning = 2 * time.Second
	f := start(t, cfg)
	run := f.run("stuck", nil)
	j := f.job("stuck-job", run, nil)
	// Pending with the Job recorded in a workflow step that is Retrying: not a Job the run waits
	// on, and not a recorded result.
	f.setStatus(run, agentsv1alpha1.AgentRunStatus{Phase: "Running", Workflow: &agentsv1alpha1.WorkflowStatus{Phase: "Running",
		Steps: []agentsv1alpha1.WorkflowStepStatus{{Name: "s", Phase: "Retrying", Attempt: 1,
			JobRef: &agentsv1alpha1.JobRef{Name: "stuck-job", Namespace: f.ns, UID: string(j.UID)}}}}})
	f.deleteJob("stuck-job")
	testenv.Eventually(t, 30*time.Second, "a JobResultHeld Warning on the Job", func() error {
		if ev := f.events("stuck-job"); !strings.Contains(strings.Join(ev, ","), "Warning/"+reasons.JobResultHeld) {
			return fmt.Errorf("events %v", ev)
		}
		return nil
	})
	if got := f.metric("agentplane_job_gc_holds_overdue"); got != 1 {
		t.Errorf("holds overdue = %v, want 1", got)
	}
	if got := f.metric("agentplane_job_gc_oldest_hold_seconds"); got < 2 {
		t.Errorf("oldest hold = %vs, want >= 2", got)
	}
	if err := f.jobGone("stuck-job"); err == nil {
		t.Fatal("the Job went without its result recorded")
	}
}
