// Package gc is job-gc's result-before-deletion guard (seed 002): run-controller puts the
// agents.proompteng.ai/job-result finalizer on every Job it creates, so that neither the TTL
// controller, nor `kubectl delete job`, nor a cascading delete can remove a Job before its
// outcome is in the AgentRun's status. This controller releases the finalizer once it is:
// when the run is finished (terminal phase and finishedAt), or when the workflow step that ran
// the Job has recorded that Job (by UID) as Succeeded or Failed; and when the run that owned the
// Job no longer exists (confirmed by a live GET, never from the cache alone).
package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/logging"
)

// Why a hold was released (the metric's label).
const (
	ReleasedRecorded  = "result-recorded"
	ReleasedOwnerGone = "owner-gone"
)

// GC releases job-result finalizers.
type GC struct {
	kube       kubernetes.Interface
	agents     *rest.RESTClient
	namespaces []string
	workers    int
	jobs, runs map[string]cache.SharedIndexInformer
	q          workqueue.TypedRateLimitingInterface[string]

	released *prometheus.CounterVec
}

const byRun = "run"

// New builds the controller for namespaces; reg may be nil.
func New(kc kubernetes.Interface, cfg *rest.Config, namespaces []string, reg prometheus.Registerer) (*GC, error) {
	agents, err := kube.RESTClientFor(cfg, agentsv1alpha1.GroupVersion)
	if err != nil {
		return nil, err
	}
	g := &GC{
		kube: kc, agents: agents, namespaces: namespaces, workers: 4,
		jobs: map[string]cache.SharedIndexInformer{}, runs: map[string]cache.SharedIndexInformer{},
		q: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "jobs"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_job_gc_holds_released_total", Help: "job-result finalizers released, by why.",
		}, []string{"why"}),
	}
	if reg != nil {
		reg.MustRegister(g.released, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentplane_job_gc_jobs_held", Help: "Jobs that carry the job-result finalizer.",
		}, func() float64 { return float64(g.held()) }))
	}
	return g, nil
}

// Run watches Jobs and AgentRuns and releases holds until ctx ends.
func (g *GC) Run(ctx context.Context) error {
	defer g.q.ShutDown()
	var synced []cache.InformerSynced
	for _, ns := range g.namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(g.kube, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController
			}))
		g.jobs[ns] = f.Batch().V1().Jobs().Informer()
		utilruntime.Must(g.jobs[ns].AddIndexers(cache.Indexers{byRun: func(obj any) ([]string, error) {
			j := obj.(*batchv1.Job)
			if ref := owner(j); ref != nil {
				return []string{j.Namespace + "/" + ref.Name}, nil
			}
			return nil, nil
		}}))
		g.runs[ns] = kube.NewInformer(g.agents, "agentruns", ns, &agentsv1alpha1.AgentRun{}, nil)
		enqueue := func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				g.q.Add(key)
			}
		}
		_, _ = g.jobs[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }})
		onRun := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if ar, ok := obj.(*agentsv1alpha1.AgentRun); ok {
				items, _ := g.jobs[ar.Namespace].GetIndexer().ByIndex(byRun, ar.Namespace+"/"+ar.Name)
				for _, it := range items {
					enqueue(it)
				}
			}
		}
		_, _ = g.runs[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: onRun, UpdateFunc: func(_, o any) { onRun(o) }, DeleteFunc: onRun,
		})
		for _, inf := range []cache.SharedIndexInformer{g.jobs[ns], g.runs[ns]} {
			go inf.RunWithContext(ctx)
			synced = append(synced, inf.HasSynced)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	logging.FromContext(ctx).Info("caches synced; guarding Job results", "namespaces", g.namespaces)
	var wg sync.WaitGroup
	for range g.workers {
		wg.Go(func() { wait.UntilWithContext(ctx, g.work, time.Second) })
	}
	<-ctx.Done()
	g.q.ShutDown()
	wg.Wait()
	return nil
}

func (g *GC) work(ctx context.Context) {
	tracer := otel.Tracer("github.com/agentplane/agentplane/services/job-gc")
	for {
		key, shutdown := g.q.Get()
		if shutdown {
			return
		}
		func() {
			defer g.q.Done(key)
			ctx, span := tracer.Start(ctx, "Reconcile Job", trace.WithAttributes(attribute.String("k8s.job", key)))
			defer span.End()
			if err := g.reconcile(ctx, key); err != nil {
				span.RecordError(err)
				logging.FromContext(ctx).Warn("reconcile Job; retrying with backoff", "job", key, "err", err)
				g.q.AddRateLimited(key)
				return
			}
			g.q.Forget(key)
		}()
	}
}

func owner(j *batchv1.Job) *metav1.OwnerReference {
	for i := range j.OwnerReferences {
		r := &j.OwnerReferences[i]
		if r.Kind == "AgentRun" && r.Controller != nil && *r.Controller {
			return r
		}
	}
	return nil
}

func holds(j *batchv1.Job) int {
	for i, f := range j.Finalizers {
		if f == agentsv1alpha1.FinalizerJobResult {
			return i
		}
	}
	return -1
}

func (g *GC) reconcile(ctx context.Context, key string) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	obj, ok, _ := g.jobs[ns].GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	j := obj.(*batchv1.Job)
	if holds(j) < 0 {
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
		live := &agentsv1alpha1.AgentRun{}
		err := g.agents.Get().Namespace(ns).Resource("agentruns").Name(ref.Name).Do(ctx).Into(live)
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
	return nil
}

// Recorded reports whether the run's status holds the outcome of the Job with uid: the run is
// finished (terminal phase and finishedAt), or the workflow step that ran it says Succeeded or
// Failed with that Job.
func Recorded(run *agentsv1alpha1.AgentRun, uid types.UID) bool {
	s := run.Status
	switch s.Phase {
	case agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed, agentsv1alpha1.PhaseCancelled:
		if s.FinishedAt != nil {
			return true
		}
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

// release removes the finalizer with a JSON patch that first tests it is still where it was,
// so a concurrent change to the list is never overwritten.
func (g *GC) release(ctx context.Context, j *batchv1.Job, why string) error {
	i := holds(j)
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": agentsv1alpha1.FinalizerJobResult},
		{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
	})
	_, err := g.kube.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "agentplane-job-gc"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	g.released.WithLabelValues(why).Inc()
	logging.FromContext(ctx).Info("released job-result hold", "job", j.Namespace+"/"+j.Name, "why", why)
	return nil
}

// held counts the Jobs in the cache that carry the finalizer.
func (g *GC) held() int {
	n := 0
	for _, inf := range g.jobs {
		for _, o := range inf.GetStore().List() {
			if holds(o.(*batchv1.Job)) >= 0 {
				n++
			}
		}
	}
	return n
}
