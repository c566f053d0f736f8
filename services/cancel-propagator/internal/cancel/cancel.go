// Package cancel is cancel-propagator (seed 003): it stops everything under an OrchestrationRun
// or AgentRun whose spec.cancel is true, and brings the run to phase Cancelled, within a bound.
//
// For a run that is not finished it records Cancelled=Unknown (CancelRequested) and a Normal
// event; then, for an OrchestrationRun, sets spec.cancel on each of its AgentRuns (each is then
// cancelled the same way) and, when the Argo Workflow CRD is served, shuts down and deletes the
// run's Workflows; for an AgentRun, suspends and deletes its Jobs (the Job controller and
// cancel-propagator delete the pods with their grace period). A child already finished or gone
// counts as done. When nothing is left, or when Config.Timeout has passed since the request, the
// run is written Cancelled (Cancelled=True, reason Cancelled or CancelTimedOut naming what still
// ran) through status-writer, which sets finishedAt. A Succeeded or Failed run keeps its phase and
// gets Cancelled=False with reason CancelIgnoredTerminal; with cancel support off, reason
// CancelDisabled. run-controller starts nothing for a run whose cancel is set (it checks live
// before creating a Job or a step's AgentRun).
package cancel

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/api/client/informers/externalversions"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// CondCancelled is the condition cancel-propagator sets on the runs it handles.
const CondCancelled = reasons.CondCancelled

// WorkflowGVR is Argo's Workflow, stopped when its CRD is served.
var WorkflowGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "workflows"}

// Deps are what cancel-propagator talks to. Registry may be nil; Dynamic may be nil (then Argo
// Workflows are not looked for).
type Deps struct {
	Kube     kubernetes.Interface
	Dynamic  dynamic.Interface
	REST     *rest.Config
	Status   statusclient.Writer
	Events   eventclient.Emitter
	Registry prometheus.Registerer
	Now      func() time.Time
}

// Propagator is cancel-propagator's controller.
type Propagator struct {
	cfg        Config
	d          Deps
	client     versioned.Interface // the generated clientset of the agentplane API groups
	ors, ars   map[string]cache.SharedIndexInformer
	jobs, pods map[string]cache.SharedIndexInformer
	ctl        *controller.Controller
	orQ, arQ   *controller.Queue
	// observe, when set (by tests), is called as the cancel of a queue key starts, and what it
	// returns when it ends.
	observe func(key string) func()

	mu        sync.Mutex
	requested map[types.UID]time.Time            // when this process first saw each cancel
	acted     map[types.UID]map[string]int       // what each cancel stopped, by kind
	jobUIDs   map[types.UID]map[types.UID]string // each cancelled run's Jobs, by UID, to find their pods once the Job is gone
	done      map[types.UID]bool                 // runs this process wrote Cancelled (the cache may lag)
	jobRun    map[types.UID]string               // a cancelled run's Jobs (by UID) to the run's queue key
	podsHit   map[types.UID]bool                 // pods this process asked to delete
	jobsHit   map[types.UID]bool                 // Jobs this process deleted (its cache may not show it yet)
	synced    atomic.Bool                        // the informers' caches have synced (Run)
	argo      struct {
		checked time.Time
		served  bool
	}

	cancels  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	stopped  *prometheus.CounterVec
}

const (
	byOwner  = "owner"  // AgentRuns by OrchestrationRun, Jobs by AgentRun: "<ns>/<owner name>"
	byJobUID = "jobuid" // pods by their Job's UID
	kindOR   = "OrchestrationRun"
	kindAR   = "AgentRun"
)

// New builds cancel-propagator for cfg.Namespaces.
func New(cfg Config, d Deps) (*Propagator, error) {
	client, err := versioned.NewForConfig(d.REST)
	if err != nil {
		return nil, fmt.Errorf("cancel-propagator: agentplane clientset: %w", err)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if cfg.Workers < 1 {
		cfg.Workers = 4
	}
	p := &Propagator{
		cfg: cfg, d: d, client: client, requested: map[types.UID]time.Time{},
		acted: map[types.UID]map[string]int{}, jobUIDs: map[types.UID]map[types.UID]string{}, done: map[types.UID]bool{},
		jobRun: map[types.UID]string{}, podsHit: map[types.UID]bool{}, jobsHit: map[types.UID]bool{},
		ors: map[string]cache.SharedIndexInformer{}, ars: map[string]cache.SharedIndexInformer{},
		jobs: map[string]cache.SharedIndexInformer{}, pods: map[string]cache.SharedIndexInformer{},
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_cancel_propagator_cancels_total",
			Help: "Cancel requests handled, by kind and outcome (Cancelled, CancelTimedOut, CancelIgnoredTerminal, CancelDisabled).",
		}, []string{"kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentplane_cancel_propagator_cancel_seconds",
			Help:    "Time from a cancel request to the run's Cancelled status, by kind.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"kind"}),
		stopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_cancel_propagator_children_terminated_total",
			Help: "Children a cancel terminated, by kind (AgentRun: cancel set; Job: suspended and deleted; Pod: deleted; Workflow: shut down and deleted).",
		}, []string{"kind"}),
	}
	for _, kind := range []string{kindOR, kindAR} { // series exist before the first cancel, for alerts
		for _, outcome := range []string{reasons.Cancelled, reasons.CancelTimedOut, reasons.CancelIgnoredTerminal, reasons.CancelDisabled} {
			p.cancels.WithLabelValues(kind, outcome)
		}
	}
	for _, kind := range []string{kindOR, kindAR} { // dashboards show 0 rather than no data
		p.duration.WithLabelValues(kind)
	}
	for _, kind := range []string{kindAR, "Job", "Pod", "Workflow"} {
		p.stopped.WithLabelValues(kind)
	}
	if r := d.Registry; r != nil {
		r.MustRegister(p.cancels, p.duration, p.stopped)
	}
	p.ctl = controller.New(controller.Options{Service: "cancel-propagator", Registry: d.Registry, Workers: cfg.Workers,
		Observe: func(k string) func() {
			if p.observe == nil {
				return func() {}
			}
			return p.observe(k)
		}})
	p.orQ = p.ctl.AddQueue(kindOR, reconciler(p.reconcileOR))
	p.arQ = p.ctl.AddQueue(kindAR, reconciler(p.reconcileAR))
	return p, nil
}

// key names a run across both queues: "<kind>/<namespace>/<name>".
func key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// enqueue adds the run named by k (key) to its kind's queue.
func (p *Propagator) enqueue(k string) { p.enqueueAfter(k, 0) }

// enqueueAfter adds the run named by k (key) to its kind's queue after d.
func (p *Propagator) enqueueAfter(k string, d time.Duration) {
	parts := strings.SplitN(k, "/", 3)
	if len(parts) != 3 {
		return
	}
	q := p.arQ
	if parts[0] == kindOR {
		q = p.orQ
	}
	if d > 0 {
		q.AddAfter(parts[1]+"/"+parts[2], d)
	} else {
		q.Add(parts[1] + "/" + parts[2])
	}
}

// reconciler adapts a cancel of (namespace, name) to the scaffold's.
func reconciler(fn func(ctx context.Context, ns, name string) error) controller.Reconciler {
	return func(ctx context.Context, k string) (controller.Result, error) {
		ns, name := controller.SplitKey(k)
		return controller.Result{}, fn(ctx, ns, name)
	}
}

func controllerRef(refs []metav1.OwnerReference, kind string) *metav1.OwnerReference {
	return controller.ControllerOf(refs, kind)
}

func unwrap(obj any) any { return controller.Unwrap(obj) }

// Synced reports whether Run's informers have synced their caches.
func (p *Propagator) Synced() bool { return p.synced.Load() }

// Run watches the runs, their Jobs and pods until ctx ends.
func (p *Propagator) Run(ctx context.Context) error {
	for _, ns := range p.cfg.Namespaces {
		ours := externalversions.NewSharedInformerFactoryWithOptions(p.client, 0, externalversions.WithNamespace(ns),
			externalversions.WithTransform(kube.DropManagedFields))
		p.ors[ns] = ours.Orchestration().V1alpha1().OrchestrationRuns().Informer()
		p.ars[ns] = ours.Agents().V1alpha1().AgentRuns().Informer()
		utilruntime.Must(p.ars[ns].AddIndexers(cache.Indexers{byOwner: controller.IndexByController(kindOR)}))
		f := informers.NewSharedInformerFactoryWithOptions(p.d.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kube.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = jobresult.Selector }))
		p.jobs[ns] = f.Batch().V1().Jobs().Informer()
		utilruntime.Must(p.jobs[ns].AddIndexers(cache.Indexers{byOwner: controller.IndexByController(kindAR)}))
		p.pods[ns] = f.Core().V1().Pods().Informer()
		utilruntime.Must(p.pods[ns].AddIndexers(cache.Indexers{byJobUID: func(obj any) ([]string, error) {
			if ref := controllerRef(obj.(*corev1.Pod).OwnerReferences, "Job"); ref != nil {
				return []string{string(ref.UID)}, nil
			}
			return nil, nil
		}}))
		p.handlers(ns)
	}
	return p.ctl.Run(ctx, func(ctx context.Context) {
		p.synced.Store(true)
		logging.FromContext(ctx).Info("caches synced; propagating cancels", "namespaces", p.cfg.Namespaces,
			"enabled", p.cfg.Enabled, "timeout", p.cfg.Timeout)
	})
}

// handlers enqueue a cancelled run whenever it, or anything under it, changes.
func (p *Propagator) handlers(ns string) {
	onOR := func(obj any) {
		if or, ok := unwrap(obj).(*orchv1alpha1.OrchestrationRun); ok && or.Spec.Cancel {
			p.enqueue(key(kindOR, or.Namespace, or.Name))
		}
	}
	onAR := func(obj any) {
		ar, ok := unwrap(obj).(*agentsv1alpha1.AgentRun)
		if !ok {
			return
		}
		if ar.Spec.Cancel {
			p.enqueue(key(kindAR, ar.Namespace, ar.Name))
		}
		if ref := controllerRef(ar.OwnerReferences, kindOR); ref != nil {
			p.enqueue(key(kindOR, ar.Namespace, ref.Name))
		}
	}
	onJob := func(obj any) {
		if j, ok := unwrap(obj).(*batchv1.Job); ok {
			if ref := controllerRef(j.OwnerReferences, kindAR); ref != nil {
				p.enqueue(key(kindAR, j.Namespace, ref.Name))
			}
		}
	}
	onPod := func(obj any) {
		pod, ok := unwrap(obj).(*corev1.Pod)
		if !ok {
			return
		}
		if ref := controllerRef(pod.OwnerReferences, "Job"); ref != nil {
			// The Job may be gone already: the run is found through the Job's UID.
			p.mu.Lock()
			k, ok := p.jobRun[ref.UID]
			p.mu.Unlock()
			if ok {
				p.enqueue(k)
			} else if o, ok, _ := p.jobs[ns].GetStore().GetByKey(ns + "/" + ref.Name); ok {
				onJob(o)
			}
		}
	}
	// A run deleted: forget what this process kept about it.
	forget := func(obj any) {
		if m, ok := unwrap(obj).(metav1.Object); ok {
			p.mu.Lock()
			delete(p.requested, m.GetUID())
			delete(p.acted, m.GetUID())
			delete(p.jobUIDs, m.GetUID())
			delete(p.done, m.GetUID())
			p.mu.Unlock()
		}
	}
	for inf, fn := range map[cache.SharedIndexInformer]func(any){p.ors[ns]: onOR, p.ars[ns]: onAR, p.jobs[ns]: onJob, p.pods[ns]: onPod} {
		del := fn
		switch inf {
		case p.ors[ns], p.ars[ns]:
			del = func(o any) { forget(o); fn(o) }
		case p.pods[ns], p.jobs[ns]:
			del = func(o any) { // gone: forget that this process deleted it
				p.mu.Lock()
				switch x := unwrap(o).(type) {
				case *corev1.Pod:
					delete(p.podsHit, x.UID)
				case *batchv1.Job:
					delete(p.jobsHit, x.UID)
				}
				p.mu.Unlock()
				fn(o)
			}
		}
		p.ctl.Watch(inf, cache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) }, DeleteFunc: del,
		})
	}
}

// run is what a cancel needs of either kind.
type run struct {
	kind, apiVersion string
	meta             metav1.ObjectMeta
	phase            string
	conds            []metav1.Condition
}

// begin handles what is common to both kinds before anything is stopped. It reports whether
// the cancel goes on, and when it was requested.
func (p *Propagator) begin(ctx context.Context, r run, what string) (bool, time.Time, error) {
	c := meta.FindStatusCondition(r.conds, CondCancelled)
	p.mu.Lock()
	done := p.done[r.meta.UID]
	at, seen := p.requested[r.meta.UID]
	p.mu.Unlock()
	switch planCancel(r.phase, c, done, p.cfg.Enabled) {
	case cancelNothing:
		return false, time.Time{}, nil
	case cancelIgnoreTerminal:
		msg := fmt.Sprintf("the run had already %s; cancel changes nothing", r.phase)
		if err := p.write(ctx, r, "", "", "", cond(metav1.ConditionFalse, reasons.CancelIgnoredTerminal, msg)); err != nil {
			return false, time.Time{}, err
		}
		p.cancels.WithLabelValues(r.kind, reasons.CancelIgnoredTerminal).Inc()
		p.emit(ctx, r, corev1.EventTypeNormal, reasons.CancelIgnoredTerminal, msg)
		return false, time.Time{}, nil
	case cancelDisabled:
		msg := "cancel support is disabled (" + EnvEnabled + "=false): nothing was stopped; delete the run's resources by hand"
		if err := p.write(ctx, r, "", "", "", cond(metav1.ConditionFalse, reasons.CancelDisabled, msg)); err != nil {
			return false, time.Time{}, err
		}
		p.cancels.WithLabelValues(r.kind, reasons.CancelDisabled).Inc()
		p.emit(ctx, r, corev1.EventTypeWarning, reasons.CancelDisabled, msg)
		return false, time.Time{}, nil
	case cancelResume:
		if !seen {
			// A restart: the condition keeps when the request was first recorded.
			at = c.LastTransitionTime.Time
			p.mu.Lock()
			p.requested[r.meta.UID] = at
			p.mu.Unlock()
		}
		return true, at, nil
	}
	if seen { // requested by this process; the cache has not shown its condition yet
		return true, at, nil
	}
	at = p.d.Now()
	msg := "cancel requested; stopping " + what
	if err := p.write(ctx, r, "", reasons.CancelRequested, msg, cond(metav1.ConditionUnknown, reasons.CancelRequested, msg)); err != nil {
		return false, time.Time{}, err
	}
	p.mu.Lock()
	p.requested[r.meta.UID] = at
	p.mu.Unlock()
	p.emit(ctx, r, corev1.EventTypeNormal, reasons.CancelRequested, msg)
	return true, at, nil
}

// cancelStep is what a cancelled run's reconcile does first.
type cancelStep int

const (
	cancelNothing        cancelStep = iota // already Cancelled (or this process wrote it), or its no-op recorded
	cancelIgnoreTerminal                   // record CancelIgnoredTerminal: the run had already finished
	cancelDisabled                         // record CancelDisabled: cancel support is off
	cancelResume                           // go on stopping: the request is recorded (its condition says since when)
	cancelRequest                          // record CancelRequested, then stop everything
)

// planCancel decides a cancel's first step from the run's phase, its Cancelled condition (nil for
// none), whether this process already wrote it Cancelled, and whether cancel support is on.
func planCancel(phase string, c *metav1.Condition, doneHere, enabled bool) cancelStep {
	switch {
	case phase == agentsv1alpha1.PhaseCancelled || doneHere:
		return cancelNothing
	case phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed:
		if c != nil && c.Reason == reasons.CancelIgnoredTerminal {
			return cancelNothing
		}
		return cancelIgnoreTerminal
	case !enabled:
		if c != nil && c.Reason == reasons.CancelDisabled {
			return cancelNothing
		}
		return cancelDisabled
	case c != nil && c.Reason == reasons.CancelRequested:
		return cancelResume
	}
	return cancelRequest
}

// finishReason is whether a cancel ends now, and how: Cancelled once nothing is left,
// CancelTimedOut once the timeout has passed with something still running.
func finishReason(left int, elapsed, timeout time.Duration) (bool, string) {
	switch {
	case left == 0:
		return true, reasons.Cancelled
	case elapsed >= timeout:
		return true, reasons.CancelTimedOut
	}
	return false, ""
}

// finish writes the run Cancelled once nothing is left, or once the timeout has passed.
func (p *Propagator) finish(ctx context.Context, r run, k string, at time.Time, left []string) (bool, error) {
	elapsed := p.d.Now().Sub(at)
	end, reason := finishReason(len(left), elapsed, p.cfg.Timeout)
	if !end {
		// Events bring the run back as its children stop; a look every 2s is the safety net.
		p.enqueueAfter(k, min(2*time.Second, p.cfg.Timeout-elapsed))
		return false, nil
	}
	msg := "cancelled"
	if stopped := p.stoppedSummary(r.meta.UID); stopped != "" {
		msg += "; stopped " + stopped
	}
	if reason == reasons.CancelTimedOut {
		msg = fmt.Sprintf("cancel timed out after %s (%s); still running: %s", p.cfg.Timeout, EnvTimeout, strings.Join(left, ", "))
	}
	if err := p.write(ctx, r, agentsv1alpha1.PhaseCancelled, reason, msg, cond(metav1.ConditionTrue, reason, msg)); err != nil {
		return false, err
	}
	p.cancels.WithLabelValues(r.kind, reason).Inc()
	p.duration.WithLabelValues(r.kind).Observe(elapsed.Seconds())
	p.mu.Lock()
	delete(p.requested, r.meta.UID)
	delete(p.acted, r.meta.UID)
	for uid := range p.jobUIDs[r.meta.UID] {
		delete(p.jobRun, uid)
	}
	delete(p.jobUIDs, r.meta.UID)
	p.done[r.meta.UID] = true
	p.mu.Unlock()
	typ := corev1.EventTypeNormal
	if reason == reasons.CancelTimedOut {
		typ = corev1.EventTypeWarning
	}
	p.emit(ctx, r, typ, reason, msg)
	logging.FromContext(ctx).Info("run cancelled", "kind", r.kind, "run", r.meta.Namespace+"/"+r.meta.Name, "reason", reason, "took", elapsed)
	return true, nil
}

// record counts what a cancel stopped, for its final message and the metric.
func (p *Propagator) record(run types.UID, kind string, n int) {
	if n == 0 {
		return
	}
	p.stopped.WithLabelValues(kind).Add(float64(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.acted[run] == nil {
		p.acted[run] = map[string]int{}
	}
	p.acted[run][kind] += n
}

func (p *Propagator) stoppedSummary(run types.UID) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for _, kind := range []string{kindAR, "Job", "Pod", "Workflow"} {
		if n := p.acted[run][kind]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s(s)", n, kind))
		}
	}
	return strings.Join(parts, ", ")
}

func (p *Propagator) reconcileOR(ctx context.Context, ns, name string) error {
	o, ok, _ := p.ors[ns].GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	or := o.(*orchv1alpha1.OrchestrationRun)
	if !or.Spec.Cancel || or.DeletionTimestamp != nil {
		return nil
	}
	r := run{kind: kindOR, apiVersion: orchv1alpha1.GroupVersion.String(), meta: or.ObjectMeta, phase: or.Status.Phase, conds: or.Status.Conditions}
	children, _ := p.ars[ns].GetIndexer().ByIndex(byOwner, ns+"/"+name)
	goOn, at, err := p.begin(ctx, r, fmt.Sprintf("its %d AgentRun(s) and their Jobs", len(children)))
	if !goOn || err != nil {
		return err
	}
	var left []string
	var running []*agentsv1alpha1.AgentRun
	for _, c := range children {
		ar := c.(*agentsv1alpha1.AgentRun)
		if ref := controllerRef(ar.OwnerReferences, kindOR); ref == nil || ref.UID != or.UID || isTerminal(ar.Status.Phase) {
			continue
		}
		p.mu.Lock()
		childDone := p.done[ar.UID]
		p.mu.Unlock()
		if childDone {
			continue
		}
		if !ar.Spec.Cancel {
			_, err := p.client.AgentsV1alpha1().AgentRuns(ns).Patch(ctx, ar.Name, types.MergePatchType,
				[]byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{})
			switch {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return fmt.Errorf("cancel AgentRun %s/%s: %w", ns, ar.Name, err)
			}
			p.record(or.UID, kindAR, 1)
		}
		running = append(running, ar)
		left = append(left, "AgentRun "+ar.Name)
	}
	wl, err := p.stopWorkflows(ctx, key(kindOR, ns, name), ns, or.UID, agentsv1alpha1.LabelOrchestrationRun, name)
	if err != nil {
		return err
	}
	left = append(left, wl...)
	done, err := p.finish(ctx, r, key(kindOR, ns, name), at, left)
	if done && len(left) > 0 {
		// Timed out: the AgentRuns still running are Cancelled too, so that job-gc lets their
		// Jobs go.
		for _, ar := range running {
			msg := "its OrchestrationRun " + name + "'s cancel timed out"
			_ = p.write(ctx, run{kind: kindAR, meta: ar.ObjectMeta}, agentsv1alpha1.PhaseCancelled, reasons.CancelTimedOut, msg,
				cond(metav1.ConditionTrue, reasons.CancelTimedOut, msg))
		}
	}
	return err
}

func (p *Propagator) reconcileAR(ctx context.Context, ns, name string) error {
	o, ok, _ := p.ars[ns].GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	ar := o.(*agentsv1alpha1.AgentRun)
	if !ar.Spec.Cancel || ar.DeletionTimestamp != nil {
		return nil
	}
	r := run{kind: kindAR, apiVersion: agentsv1alpha1.GroupVersion.String(), meta: ar.ObjectMeta, phase: ar.Status.Phase, conds: ar.Status.Conditions}
	jobs, _ := p.jobs[ns].GetIndexer().ByIndex(byOwner, ns+"/"+name)
	goOn, at, err := p.begin(ctx, r, fmt.Sprintf("its %d Job(s)", len(jobs)))
	if !goOn || err != nil {
		return err
	}
	all, err := p.stopJobs(ctx, ar, jobs)
	if err != nil {
		return err
	}
	var left []string
	for uid, job := range all {
		n, err := p.stopPods(ctx, ns, ar.UID, uid)
		if err != nil {
			return err
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("Job %s (%d pod(s))", job, n))
		}
	}
	sort.Strings(left)
	wl, err := p.stopWorkflows(ctx, key(kindAR, ns, name), ns, ar.UID, agentsv1alpha1.LabelAgentRun, name)
	if err != nil {
		return err
	}
	left = append(left, wl...)
	if len(left) == 0 {
		// The cache says nothing runs; the API server confirms before the run is called Cancelled.
		if running, err := p.podsStillRunning(ctx, ns, all); err != nil || running {
			if running {
				p.enqueueAfter(key(kindAR, ns, name), 500*time.Millisecond)
			}
			return err
		}
	}
	_, err = p.finish(ctx, r, key(kindAR, ns, name), at, left)
	return err
}

// stopJobs stops the run's Jobs in the cache and returns every Job of the run by UID: those in
// the cache, those its status records, and those seen before (a Job may be gone while its pods
// still stop).
func (p *Propagator) stopJobs(ctx context.Context, ar *agentsv1alpha1.AgentRun, jobs []any) (map[types.UID]string, error) {
	p.mu.Lock()
	uids := p.jobUIDs[ar.UID]
	if uids == nil {
		uids = map[types.UID]string{}
		p.jobUIDs[ar.UID] = uids
	}
	p.mu.Unlock()
	remember := func(ref *agentsv1alpha1.JobRef) {
		if ref != nil && ref.UID != "" {
			p.mu.Lock()
			uids[types.UID(ref.UID)] = ref.Name
			p.jobRun[types.UID(ref.UID)] = key(kindAR, ar.Namespace, ar.Name)
			p.mu.Unlock()
		}
	}
	remember(ar.Status.JobRef)
	if ar.Status.Workflow != nil {
		for _, st := range ar.Status.Workflow.Steps {
			remember(st.JobRef)
		}
	}
	for _, o := range jobs {
		j := o.(*batchv1.Job)
		if ref := controllerRef(j.OwnerReferences, kindAR); ref == nil || ref.UID != ar.UID {
			continue
		}
		remember(&agentsv1alpha1.JobRef{Name: j.Name, UID: string(j.UID)})
		if err := p.stopJob(ctx, ar.UID, j); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	all := make(map[types.UID]string, len(uids))
	for k, v := range uids {
		all[k] = v
	}
	return all, nil
}

// podsStillRunning asks the API server whether any pod of the Jobs (by UID) has not finished.
func (p *Propagator) podsStillRunning(ctx context.Context, ns string, jobs map[types.UID]string) (bool, error) {
	for uid := range jobs {
		l, err := p.d.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(uid)})
		if err != nil {
			return false, fmt.Errorf("list the pods of Job %s/%s: %w", ns, jobs[uid], err)
		}
		for _, pod := range l.Items {
			if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				return true, nil
			}
		}
	}
	return false, nil
}

// stopJob suspends the Job (its controller deletes the pods and starts none) and deletes it.
// A Job this process already deleted is not deleted or counted again, however stale the cache's
// copy (a second pass can run before the cache shows the deletion).
func (p *Propagator) stopJob(ctx context.Context, run types.UID, j *batchv1.Job) error {
	if j.DeletionTimestamp != nil {
		return nil
	}
	// Remembered before the deletion, so that the informer's delete event, which may arrive
	// before Delete returns, is what forgets it (no entry outlives its Job).
	p.mu.Lock()
	hit := p.jobsHit[j.UID]
	p.jobsHit[j.UID] = true
	p.mu.Unlock()
	if hit {
		return nil
	}
	forget := func() {
		p.mu.Lock()
		delete(p.jobsHit, j.UID)
		p.mu.Unlock()
	}
	jobs := p.d.Kube.BatchV1().Jobs(j.Namespace)
	if j.Spec.Suspend == nil || !*j.Spec.Suspend {
		_, err := jobs.Patch(ctx, j.Name, types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{FieldManager: "agentplane-cancel-propagator"})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
			forget()
			return fmt.Errorf("suspend Job %s/%s: %w", j.Namespace, j.Name, err)
		}
	}
	err := jobs.Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		Preconditions: &metav1.Preconditions{UID: ptr.To(j.UID)}})
	switch {
	case err == nil:
		p.record(run, "Job", 1)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone (a stale copy of a Job whose deletion was observed and forgotten), or
		// another Job of that name: nothing this call stopped, counted or needs to remember.
		forget()
	default:
		forget()
		return fmt.Errorf("delete Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// stopPods deletes, with their grace period, the pods of the Job with uid that are not being
// deleted yet, and returns how many of its pods have not finished.
func (p *Propagator) stopPods(ctx context.Context, ns string, run, uid types.UID) (int, error) {
	items, _ := p.pods[ns].GetIndexer().ByIndex(byJobUID, string(uid))
	running := 0
	for _, o := range items {
		pod := o.(*corev1.Pod)
		if ph := pod.Status.Phase; ph == corev1.PodSucceeded || ph == corev1.PodFailed {
			continue
		}
		running++
		p.mu.Lock()
		hit := p.podsHit[pod.UID]
		p.podsHit[pod.UID] = true
		p.mu.Unlock()
		if pod.DeletionTimestamp != nil || hit {
			continue
		}
		err := p.d.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return running, fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if err == nil { // likewise: a pod already gone was not stopped by this call
			p.record(run, "Pod", 1)
		}
	}
	return running, nil
}

// argoServed reports whether the API server serves Argo's Workflows (asked at most every 30s;
// the discovery call is made outside the lock).
func (p *Propagator) argoServed() bool {
	if p.d.Dynamic == nil {
		return false
	}
	p.mu.Lock()
	fresh, served := p.d.Now().Sub(p.argo.checked) < 30*time.Second, p.argo.served
	p.mu.Unlock()
	if fresh {
		return served
	}
	served = false
	if l, err := p.d.Kube.Discovery().ServerResourcesForGroupVersion(WorkflowGVR.GroupVersion().String()); err == nil {
		for _, r := range l.APIResources {
			served = served || r.Name == WorkflowGVR.Resource
		}
	}
	p.mu.Lock()
	p.argo.checked, p.argo.served = p.d.Now(), served
	p.mu.Unlock()
	return served
}

// stopWorkflows shuts down (spec.shutdown=Terminate) and deletes the Argo Workflows of a run:
// those it owns, or labelled with its name. It returns what is left.
func (p *Propagator) stopWorkflows(ctx context.Context, k, ns string, uid types.UID, label, name string) ([]string, error) {
	if !p.argoServed() {
		return nil, nil
	}
	wfs := p.d.Dynamic.Resource(WorkflowGVR).Namespace(ns)
	l, err := wfs.List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list Workflows in %s: %w", ns, err)
	}
	var left []string
	for _, wf := range l.Items {
		ours := wf.GetLabels()[label] == name
		for _, ref := range wf.GetOwnerReferences() {
			ours = ours || ref.UID == uid
		}
		if !ours {
			continue
		}
		left = append(left, "Workflow "+wf.GetName())
		if wf.GetDeletionTimestamp() != nil {
			continue
		}
		_, err := wfs.Patch(ctx, wf.GetName(), types.MergePatchType, []byte(`{"spec":{"shutdown":"Terminate"}}`), metav1.PatchOptions{FieldManager: "agentplane-cancel-propagator"})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("shut down Workflow %s/%s: %w", ns, wf.GetName(), err)
		}
		err = wfs.Delete(ctx, wf.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete Workflow %s/%s: %w", ns, wf.GetName(), err)
		}
		p.record(uid, "Workflow", 1)
	}
	if len(left) > 0 {
		// Workflows are not watched: look again shortly.
		p.enqueueAfter(k, time.Second)
	}
	return left, nil
}

func isTerminal(phase string) bool {
	return phase == agentsv1alpha1.PhaseSucceeded || phase == agentsv1alpha1.PhaseFailed || phase == agentsv1alpha1.PhaseCancelled
}

func cond(status metav1.ConditionStatus, reason, message string) *pb.Condition {
	return &pb.Condition{Type: CondCancelled, Status: string(status), Reason: reason, Message: message}
}

// write records the run's status through status-writer; phase "" keeps the phase.
func (p *Propagator) write(ctx context.Context, r run, phase, reason, message string, c *pb.Condition) error {
	_, err := p.d.Status.Write(ctx, statusclient.Request(r.kind, &r.meta, r.meta.Generation, phase, reason, message, c))
	switch err := statusclient.Outcome(err); {
	case err == nil:
		return nil
	case errors.Is(err, statusclient.ErrStale):
		return controller.Waiting(err) // the run moved on: the retry reads the newer object
	default:
		return fmt.Errorf("write %s %s/%s status: %w", r.kind, r.meta.Namespace, r.meta.Name, err)
	}
}

// emit sends an event about the run through event-emitter; a failure is logged, never returned.
func (p *Propagator) emit(ctx context.Context, r run, typ, reason, note string) {
	if r.apiVersion != "" {
		eventclient.Notify(ctx, p.d.Events, r.apiVersion, r.kind, &r.meta, typ, reason, "Cancel", note)
	}
}
