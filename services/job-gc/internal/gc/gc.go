// Package gc is job-gc (seed 002). It keeps every Job's result until it is recorded, deletes
// finished runs after their retention, and makes a vanished Job visible.
//
//   - Result before deletion: run-controller puts the agents.proompteng.ai/job-result finalizer
//     on every Job it creates, so that neither the TTL controller, nor `kubectl delete job`, nor
//     a cascading delete can remove a Job before its outcome is in the AgentRun's status. job-gc
//     releases the finalizer once it is: when the run is finished (terminal phase and
//     finishedAt), or when the workflow step that ran the Job has recorded that Job (by UID) as
//     Succeeded or Failed; and when the run that owned the Job no longer exists (confirmed by a
//     live GET, never from the cache alone). A finished or deleted Job still held after
//     HoldWarning raises a JobResultHeld Warning.
//   - Retention: a finished AgentRun is deleted, with its Jobs, spec.ttlSecondsAfterFinished (or
//     Config.Retention) after finishedAt. Runs owned by an OrchestrationRun go with it instead.
//   - Missing Jobs: a non-terminal run whose recorded Job is gone, or is being deleted before it
//     finished, (confirmed by a live GET) gets JobMissing=True, a WorkflowJobMissing Warning and
//     a count; still missing after MissingGrace, the run fails with reason WorkflowJobMissing.
package gc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/api/client/informers/externalversions"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Why a hold was released (the metric's label).
const (
	ReleasedRecorded  = "result-recorded"
	ReleasedOwnerGone = "owner-gone"
)

// CondJobMissing is the AgentRun condition job-gc sets when the run's Job is gone before its
// outcome was recorded (reason WorkflowJobMissing), and clears (reason JobFound) if it is back.
const CondJobMissing = reasons.CondJobMissing

// Deps are what job-gc talks to. Registry may be nil.
type Deps struct {
	Kube     kubernetes.Interface
	REST     *rest.Config
	Status   statusclient.Writer
	Events   eventclient.Emitter
	Registry prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// GC is job-gc's controller.
type GC struct {
	cfg        Config
	d          Deps
	client     versioned.Interface // the generated clientset of the agentplane API groups
	jobs, runs map[string]cache.SharedIndexInformer
	ctl        *controller.Controller
	jobQ, runQ *controller.Queue

	mu     sync.Mutex
	warned map[types.UID]bool // Jobs a JobResultHeld Warning was raised for

	released  *prometheus.CounterVec
	deletions *prometheus.CounterVec
	missing   *prometheus.CounterVec
	failed    *prometheus.CounterVec
}

const byRun = "run"

// New builds job-gc for cfg.Namespaces.
func New(cfg Config, d Deps) (*GC, error) {
	client, err := versioned.NewForConfig(d.REST)
	if err != nil {
		return nil, fmt.Errorf("job-gc: agentplane clientset: %w", err)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if cfg.Workers < 1 {
		cfg.Workers = 4
	}
	g := &GC{
		cfg: cfg, d: d, client: client, warned: map[types.UID]bool{},
		jobs: map[string]cache.SharedIndexInformer{}, runs: map[string]cache.SharedIndexInformer{},
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_job_gc_holds_released_total", Help: "job-result finalizers released, by why.",
		}, []string{"why"}),
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_job_gc_deletions_total", Help: "Objects job-gc deleted at the end of an AgentRun's retention, by kind.",
		}, []string{"kind"}),
		missing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_job_gc_missing_jobs_total", Help: "AgentRuns found missing their Job (WorkflowJobMissing), by namespace.",
		}, []string{"namespace"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_job_gc_missing_job_failures_total", Help: "AgentRuns failed with WorkflowJobMissing after the grace period, by namespace.",
		}, []string{"namespace"}),
	}
	g.ctl = controller.New(controller.Options{Service: "job-gc", Registry: d.Registry, Workers: cfg.Workers})
	g.jobQ = g.ctl.AddQueue("Job", noResult(g.reconcileJob))
	g.runQ = g.ctl.AddQueue("AgentRun", noResult(g.reconcileRun))
	// Every namespace's series exists from the start, so alerts on increase() see the first one.
	for _, ns := range cfg.Namespaces {
		g.missing.WithLabelValues(ns)
		g.failed.WithLabelValues(ns)
	}
	for _, kind := range []string{"Job", "AgentRun"} { // dashboards show 0 rather than no data
		g.deletions.WithLabelValues(kind)
	}
	if r := d.Registry; r != nil {
		r.MustRegister(g.released, g.deletions, g.missing, g.failed,
			holdCollector{g},
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "agentplane_job_gc_agentrun_retention_seconds",
				Help: "How long a finished AgentRun without spec.ttlSecondsAfterFinished is kept (JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS).",
			}, func() float64 { return cfg.Retention.Seconds() }),
		)
	}
	return g, nil
}

// Run watches Jobs and AgentRuns until ctx ends.
func (g *GC) Run(ctx context.Context) error {
	for _, ns := range g.cfg.Namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(g.d.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kube.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = jobresult.Selector
			}))
		g.jobs[ns] = f.Batch().V1().Jobs().Informer()
		utilruntime.Must(g.jobs[ns].AddIndexers(cache.Indexers{byRun: controller.IndexByController("AgentRun")}))
		g.runs[ns] = externalversions.NewSharedInformerFactoryWithOptions(g.client, 0, externalversions.WithNamespace(ns),
			externalversions.WithTransform(kube.DropManagedFields)).Agents().V1alpha1().AgentRuns().Informer()
		g.ctl.Watch(g.jobs[ns], controller.Handler(func(j *batchv1.Job, deleted bool) {
			if deleted {
				g.mu.Lock()
				delete(g.warned, j.UID)
				g.mu.Unlock()
			} else {
				g.jobQ.Add(j.Namespace + "/" + j.Name)
			}
			if ref := owner(j); ref != nil {
				g.runQ.Add(j.Namespace + "/" + ref.Name)
			}
		}))
		g.ctl.Watch(g.runs[ns], controller.Handler(func(ar *agentsv1alpha1.AgentRun, deleted bool) {
			key := ar.Namespace + "/" + ar.Name
			if !deleted {
				g.runQ.Add(key)
			}
			for _, j := range controller.ByIndex[*batchv1.Job](g.jobs[ar.Namespace], byRun, key) {
				g.jobQ.Add(j.Namespace + "/" + j.Name)
			}
		}))
	}
	return g.ctl.Run(ctx, func(ctx context.Context) {
		logging.FromContext(ctx).Info("caches synced; guarding Job results", "namespaces", g.cfg.Namespaces,
			"retention", g.cfg.Retention, "missingJobGrace", g.cfg.MissingGrace, "holdWarning", g.cfg.HoldWarning)
	})
}

// noResult adapts a reconcile that schedules its own look-again (AddAfter) to the scaffold's.
func noResult(fn func(context.Context, string) error) controller.Reconciler {
	return func(ctx context.Context, key string) (controller.Result, error) {
		return controller.Result{}, fn(ctx, key)
	}
}

func owner(j *batchv1.Job) *metav1.OwnerReference {
	return controller.ControllerOf(j.OwnerReferences, "AgentRun")
}

// finishedAt is when the Job completed or failed, or zero while it runs.
func finishedAt(j *batchv1.Job) time.Time {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			if j.Status.CompletionTime != nil {
				return j.Status.CompletionTime.Time
			}
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// holdSince is when a hold started to keep something: the Job finished or its deletion was
// asked for, whichever came first; zero while the Job runs and nobody deletes it.
func holdSince(j *batchv1.Job) time.Time {
	t := finishedAt(j)
	if d := j.DeletionTimestamp; d != nil && (t.IsZero() || d.Time.Before(t)) {
		t = d.Time
	}
	return t
}

func (g *GC) reconcileJob(ctx context.Context, key string) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	obj, ok, _ := g.jobs[ns].GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	j := obj.(*batchv1.Job)
	if jobresult.Index(j) < 0 {
		return nil
	}
	ref := owner(j)
	if ref == nil {
		return g.release(ctx, j, ReleasedOwnerGone)
	}
	var run *agentsv1alpha1.AgentRun
	if o, ok, _ := g.runs[ns].GetStore().GetByKey(ns + "/" + ref.Name); ok {
		run = o.(*agentsv1alpha1.AgentRun)
	}
	if run == nil || run.UID != ref.UID {
		// The cache may lag; only the API server can say the run is gone.
		live, err := g.client.AgentsV1alpha1().AgentRuns(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && live.UID != ref.UID):
			return g.release(ctx, j, ReleasedOwnerGone)
		case err != nil:
			return fmt.Errorf("get AgentRun %s/%s: %w", ns, ref.Name, err)
		}
		run = live
	}
	if Recorded(run, j.UID) {
		return g.release(ctx, j, ReleasedRecorded)
	}
	// Held on purpose; but a finished or deleted Job whose result stays unrecorded for long
	// means something upstream is stuck, and an operator should hear of it.
	since := holdSince(j)
	if since.IsZero() {
		return nil
	}
	if wait := g.cfg.HoldWarning - g.d.Now().Sub(since); wait > 0 {
		g.jobQ.AddAfter(key, wait)
		return nil
	}
	g.mu.Lock()
	first := !g.warned[j.UID]
	g.warned[j.UID] = true
	g.mu.Unlock()
	if first {
		msg := fmt.Sprintf("Job %s has kept its result for %s: AgentRun %s (phase %q) has not recorded its outcome; run-controller must record it, "+
			"or see docs/architecture.md (job-gc) to release the hold by hand", j.Name, g.d.Now().Sub(since).Round(time.Second), run.Name, run.Status.Phase)
		logging.FromContext(ctx).Warn("job-result hold overdue", "job", key, "run", run.Name, "since", since)
		eventclient.Notify(ctx, g.d.Events, "batch/v1", "Job", j, corev1.EventTypeWarning, reasons.JobResultHeld, "Hold", msg)
	}
	return nil
}

// Recorded reports whether the run's status holds the outcome of the Job with uid: the run is
// finished (terminal phase and finishedAt), or the workflow step that ran it says Succeeded or
// Failed with that Job.
func Recorded(run *agentsv1alpha1.AgentRun, uid types.UID) bool {
	s := run.Status
	if terminal(s.Phase) && s.FinishedAt != nil {
		return true
	}
	if s.Workflow != nil {
		for _, st := range s.Workflow.Steps {
			if st.JobRef != nil && st.JobRef.UID == string(uid) &&
				(st.Phase == agentsv1alpha1.PhaseSucceeded || st.Phase == agentsv1alpha1.PhaseFailed) {
				return true
			}
		}
	}
	return false
}

func terminal(phase string) bool {
	return phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed || phase == agentsv1alpha1.PhaseCancelled
}

// release removes the finalizer with a JSON patch that first tests it is still where it was,
// so a concurrent change to the list is never overwritten.
func (g *GC) release(ctx context.Context, j *batchv1.Job, why string) error {
	patch, err := jobresult.ReleasePatch(j)
	if err != nil {
		return nil
	}
	_, err = g.d.Kube.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "agentplane-job-gc"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsInvalid(err) {
		// The patch's test failed: the finalizer list changed since the cache saw it (the TTL
		// controller's foreground deletion adds one). The retry reads the newer Job.
		return fmt.Errorf("release Job %s/%s: its finalizers changed since they were read; retrying with the newer Job", j.Namespace, j.Name)
	}
	if err != nil {
		return fmt.Errorf("release Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	g.released.WithLabelValues(why).Inc()
	logging.FromContext(ctx).Info("released job-result hold", "job", j.Namespace+"/"+j.Name, "why", why)
	return nil
}

// holdCollector reports the hold gauges from one pass over the cache per scrape.
type holdCollector struct{ g *GC }

var (
	heldDesc    = prometheus.NewDesc("agentplane_job_gc_jobs_held", "Jobs that carry the job-result finalizer.", nil, nil)
	oldestDesc  = prometheus.NewDesc("agentplane_job_gc_oldest_hold_seconds", "Age of the oldest hold on a finished or deleted Job (0 when there is none).", nil, nil)
	overdueDesc = prometheus.NewDesc("agentplane_job_gc_holds_overdue", "Finished or deleted Jobs held longer than JANGAR_JOB_GC_HOLD_WARNING_SECONDS.", nil, nil)
)

func (holdCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- heldDesc
	ch <- oldestDesc
	ch <- overdueDesc
}

func (c holdCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.holdStats()
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(s.held))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, s.oldest.Seconds())
	ch <- prometheus.MustNewConstMetric(overdueDesc, prometheus.GaugeValue, float64(s.overdue))
}

type holdStats struct {
	held, overdue int
	oldest        time.Duration
}

// holdStats counts, from the cache, the Jobs that carry the finalizer, those finished or
// deleted and held past HoldWarning, and the age of the oldest such hold.
func (g *GC) holdStats() holdStats {
	var s holdStats
	now := g.d.Now()
	for _, inf := range g.jobs {
		for _, o := range inf.GetStore().List() {
			j := o.(*batchv1.Job)
			if jobresult.Index(j) < 0 {
				continue
			}
			s.held++
			if since := holdSince(j); !since.IsZero() {
				age := now.Sub(since)
				s.oldest = max(s.oldest, age)
				if age >= g.cfg.HoldWarning {
					s.overdue++
				}
			}
		}
	}
	return s
}

// ownedByOrchestration reports whether an OrchestrationRun owns the run (its retention is the
// OrchestrationRun's: the run is deleted with it).
func ownedByOrchestration(ar *agentsv1alpha1.AgentRun) bool {
	for _, r := range ar.OwnerReferences {
		if r.Kind == "OrchestrationRun" {
			return true
		}
	}
	return false
}

func (g *GC) reconcileRun(ctx context.Context, key string) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	obj, ok, _ := g.runs[ns].GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	ar := obj.(*agentsv1alpha1.AgentRun)
	if ar.DeletionTimestamp != nil {
		return nil
	}
	if terminal(ar.Status.Phase) {
		return g.retain(ctx, key, ar)
	}
	if ar.Spec.Cancel {
		return nil // cancel-propagator stops its Jobs on purpose
	}
	return g.checkJobs(ctx, key, ar)
}

// retain deletes a finished run, and its Jobs, once its retention has passed.
func (g *GC) retain(ctx context.Context, key string, ar *agentsv1alpha1.AgentRun) error {
	if ar.Status.FinishedAt == nil || ownedByOrchestration(ar) {
		return nil
	}
	ttl := g.cfg.Retention
	if t := ar.Spec.TTLSecondsAfterFinished; t != nil {
		ttl = time.Duration(*t) * time.Second
	}
	if wait := ar.Status.FinishedAt.Add(ttl).Sub(g.d.Now()); wait > 0 {
		g.runQ.AddAfter(key, wait)
		return nil
	}
	bg := metav1.DeletePropagationBackground
	// The Jobs first (their pods follow through the garbage collector), so that none outlives
	// its run even where no garbage collector runs.
	items, _ := g.jobs[ar.Namespace].GetIndexer().ByIndex(byRun, key)
	for _, it := range items {
		j := it.(*batchv1.Job)
		if ref := owner(j); ref == nil || ref.UID != ar.UID || j.DeletionTimestamp != nil {
			continue
		}
		err := g.d.Kube.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{
			PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: ptr.To(j.UID)}})
		switch {
		case err == nil:
			g.deletions.WithLabelValues("Job").Inc()
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			return fmt.Errorf("delete Job %s/%s at the end of its run's retention: %w", j.Namespace, j.Name, err)
		}
	}
	err := g.client.AgentsV1alpha1().AgentRuns(ar.Namespace).Delete(ctx, ar.Name,
		metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: ptr.To(ar.UID)}})
	switch {
	case err == nil:
		g.deletions.WithLabelValues("AgentRun").Inc()
		logging.FromContext(ctx).Info("deleted AgentRun at the end of its retention", "run", key, "finishedAt", ar.Status.FinishedAt.Time, "retention", ttl)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
	default:
		return fmt.Errorf("delete AgentRun %s at the end of its retention: %w", key, err)
	}
	return nil
}

// expectedJobs are the Jobs a non-terminal run is waiting on: its Job, or the Jobs of its
// workflow steps that are Pending or Running.
func expectedJobs(ar *agentsv1alpha1.AgentRun) []agentsv1alpha1.JobRef {
	var out []agentsv1alpha1.JobRef
	if wf := ar.Status.Workflow; wf != nil && len(wf.Steps) > 0 {
		for _, s := range wf.Steps {
			if s.JobRef != nil && (s.Phase == agentsv1alpha1.PhasePending || s.Phase == agentsv1alpha1.PhaseRunning) {
				out = append(out, *s.JobRef)
			}
		}
		return out
	}
	if ar.Status.JobRef != nil {
		out = append(out, *ar.Status.JobRef)
	}
	return out
}

// jobMissing says why the run's Job ref can no longer deliver a result, or "" when it can. A
// Job absent from the cache is confirmed with a live GET: the cache may merely lag.
func (g *GC) jobMissing(ctx context.Context, ns string, ref agentsv1alpha1.JobRef) (string, error) {
	doomed := func(j *batchv1.Job) string {
		if j.DeletionTimestamp != nil && finishedAt(j).IsZero() {
			return fmt.Sprintf("Job %s was deleted before it finished", j.Name)
		}
		return ""
	}
	if o, ok, _ := g.jobs[ns].GetStore().GetByKey(ns + "/" + ref.Name); ok {
		if j := o.(*batchv1.Job); string(j.UID) == ref.UID && doomed(j) == "" {
			return "", nil
		}
	}
	live, err := g.d.Kube.BatchV1().Jobs(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && string(live.UID) != ref.UID):
		return fmt.Sprintf("Job %s (uid %s) is gone before its result was recorded", ref.Name, ref.UID), nil
	case err != nil:
		return "", fmt.Errorf("get Job %s/%s: %w", ns, ref.Name, err)
	}
	return doomed(live), nil
}

// checkJobs reports a run whose Job is missing, and fails it once MissingGrace has passed.
func (g *GC) checkJobs(ctx context.Context, key string, ar *agentsv1alpha1.AgentRun) error {
	var why []string
	for _, ref := range expectedJobs(ar) {
		w, err := g.jobMissing(ctx, ar.Namespace, ref)
		if err != nil {
			return err
		}
		if w != "" {
			why = append(why, w)
		}
	}
	c := meta.FindStatusCondition(ar.Status.Conditions, CondJobMissing)
	reported := c != nil && c.Status == metav1.ConditionTrue
	if len(why) == 0 {
		if reported {
			return g.write(ctx, ar, "", "", "", &pb.Condition{Type: CondJobMissing, Status: "False",
				Reason: reasons.JobFound, Message: "the run's Jobs are all there"})
		}
		return nil
	}
	msg := strings.Join(why, "; ")
	// A cancel deletes the run's Jobs on purpose; the cache may not show it yet.
	live, err := g.client.AgentsV1alpha1().AgentRuns(ar.Namespace).Get(ctx, ar.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get AgentRun %s: %w", key, err)
	case live.Spec.Cancel || terminal(live.Status.Phase):
		return nil
	}
	if !reported {
		note := fmt.Sprintf("%s; the run fails with %s in %s unless it is back", msg, reasons.WorkflowJobMissing, g.cfg.MissingGrace)
		if err := g.write(ctx, ar, "", "", "",
			&pb.Condition{Type: CondJobMissing, Status: "True", Reason: reasons.WorkflowJobMissing, Message: note}); err != nil {
			return err
		}
		g.missing.WithLabelValues(ar.Namespace).Inc()
		logging.FromContext(ctx).Warn("run is missing its Job", "run", key, "why", msg)
		eventclient.Notify(ctx, g.d.Events, agentsv1alpha1.GroupVersion.String(), "AgentRun", ar,
			corev1.EventTypeWarning, reasons.WorkflowJobMissing, "Check", note)
		g.runQ.AddAfter(key, g.cfg.MissingGrace)
		return nil
	}
	if wait := g.cfg.MissingGrace - g.d.Now().Sub(c.LastTransitionTime.Time); wait > 0 {
		g.runQ.AddAfter(key, wait)
		return nil
	}
	msg += "; its result cannot be collected"
	if err := g.write(ctx, ar, agentsv1alpha1.PhaseFailed, reasons.WorkflowJobMissing, msg,
		&pb.Condition{Type: reasons.CondSucceeded, Status: "False", Reason: reasons.WorkflowJobMissing, Message: msg}); err != nil {
		return err
	}
	g.failed.WithLabelValues(ar.Namespace).Inc()
	logging.FromContext(ctx).Warn("run failed: its Job is missing", "run", key, "why", msg)
	return nil
}

// write records status through status-writer. The run's observedGeneration is kept: job-gc
// reconciles no spec.
func (g *GC) write(ctx context.Context, ar *agentsv1alpha1.AgentRun, phase, reason, message string, conds ...*pb.Condition) error {
	gen := ar.Status.ObservedGeneration
	if gen == 0 {
		gen = ar.Generation
	}
	_, err := g.d.Status.Write(ctx, statusclient.Request("AgentRun", ar, gen, phase, reason, message, conds...))
	switch err := statusclient.Outcome(err); {
	case err == nil:
		return nil
	case errors.Is(err, statusclient.ErrStale):
		// The run moved on (finished, a newer generation): the retry reads the newer object
		// from the cache.
		return controller.Waiting(err)
	default:
		return fmt.Errorf("write AgentRun %s/%s status: %w", ar.Namespace, ar.Name, err)
	}
}
