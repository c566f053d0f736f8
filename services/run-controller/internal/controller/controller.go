// Package controller is run-controller: it turns AgentRuns into Jobs and OrchestrationRuns into
// AgentRuns. It follows the client-go controller idiom: shared informers feed rate-limited work
// queues, workers reconcile one object at a time from the informer caches (level-triggered:
// every reconcile recomputes from what exists), and nothing polls the API server. Status is
// written only through status-writer and events only through event-emitter.
//
// One reconcile function per kind: reconcileAgentRun (agentrun.go) and
// reconcileOrchestrationRun (orchestrationrun.go).
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/statusclient"
)

// Deps are what the controller talks to.
type Deps struct {
	Kube     kubernetes.Interface
	Metadata metadata.Interface
	// REST is the API server's configuration; typed clients for the agentplane groups are built from it.
	REST    *rest.Config
	Status  statusclient.Writer
	Events  eventclient.Emitter
	Metrics *Metrics
}

// Controller reconciles AgentRuns and OrchestrationRuns in its namespaces.
type Controller struct {
	cfg    Config
	d      Deps
	agents *rest.RESTClient
	orch   *rest.RESTClient
	tracer trace.Tracer

	// Informers by namespace.
	runs, agentDefs, orchRuns, orchs, jobs, pods map[string]cache.SharedIndexInformer

	runQ  workqueue.TypedRateLimitingInterface[string]
	orchQ workqueue.TypedRateLimitingInterface[string]

	limits *admission
	// now is the clock (tests move it).
	now func() time.Time
	// observe, when set (by tests), is called as a reconcile of "<kind>/<namespace>/<name>"
	// starts, and what it returns when it ends.
	observe func(key string) func()

	mu sync.Mutex
	// warned remembers the last Warning reason emitted per object, so that a run waiting on the
	// same problem does not emit on every reconcile.
	warned map[string]string
}

var (
	agentsGV = agentsv1alpha1.GroupVersion
	orchGV   = orchv1alpha1.GroupVersion
)

// Index names.
const (
	byAgent         = "agent"         // AgentRuns by namespace/agentRef.name
	byOrchestration = "orchestration" // OrchestrationRuns by namespace/orchestrationRef.name
	byJob           = "job"           // pods by namespace/owning Job name
	byOwnerRun      = "owner-run"     // Jobs by namespace/owning AgentRun name
)

// New builds a controller; Run starts it.
func New(cfg Config, d Deps) (*Controller, error) {
	if len(cfg.Namespaces) == 0 {
		return nil, errors.New("run-controller: no namespaces to act in")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(nil)
	}
	agents, err := kube.RESTClientFor(d.REST, agentsGV)
	if err != nil {
		return nil, err
	}
	orch, err := kube.RESTClientFor(d.REST, orchGV)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg: cfg, d: d, agents: agents, orch: orch,
		tracer: otel.Tracer("github.com/agentplane/agentplane/services/run-controller"),
		runs:   map[string]cache.SharedIndexInformer{}, agentDefs: map[string]cache.SharedIndexInformer{},
		orchRuns: map[string]cache.SharedIndexInformer{}, orchs: map[string]cache.SharedIndexInformer{},
		jobs: map[string]cache.SharedIndexInformer{}, pods: map[string]cache.SharedIndexInformer{},
		runQ: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "agentruns"}),
		orchQ: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "orchestrationruns"}),
		now:    time.Now,
		warned: map[string]string{},
	}
	c.limits = newAdmission(cfg.Limits, c.notStartedRuns)
	d.Metrics.bind(c)
	return c, nil
}

func nsKey(ns, name string) string { return ns + "/" + name }

// Run starts the informers, waits for their caches, and reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	log := logging.FromContext(ctx)
	defer c.runQ.ShutDown()
	defer c.orchQ.ShutDown()
	var synced []cache.InformerSynced
	for _, ns := range c.cfg.Namespaces {
		c.runs[ns] = kube.NewInformer(c.agents, "agentruns", ns, &agentsv1alpha1.AgentRun{}, cache.Indexers{
			byAgent: func(obj any) ([]string, error) {
				ar := obj.(*agentsv1alpha1.AgentRun)
				return []string{nsKey(ar.Namespace, ar.Spec.AgentRef.Name)}, nil
			},
		})
		c.agentDefs[ns] = kube.NewInformer(c.agents, "agents", ns, &agentsv1alpha1.Agent{}, nil)
		c.orchRuns[ns] = kube.NewInformer(c.orch, "orchestrationruns", ns, &orchv1alpha1.OrchestrationRun{}, cache.Indexers{
			byOrchestration: func(obj any) ([]string, error) {
				or := obj.(*orchv1alpha1.OrchestrationRun)
				return []string{nsKey(or.Namespace, or.Spec.OrchestrationRef.Name)}, nil
			},
		})
		c.orchs[ns] = kube.NewInformer(c.orch, "orchestrations", ns, &orchv1alpha1.Orchestration{}, nil)
		factory := informers.NewSharedInformerFactoryWithOptions(c.d.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kube.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController
			}))
		c.jobs[ns] = factory.Batch().V1().Jobs().Informer()
		utilruntime.Must(c.jobs[ns].AddIndexers(cache.Indexers{byOwnerRun: func(obj any) ([]string, error) {
			if ref := controllerOf(obj.(*batchv1.Job).OwnerReferences, "AgentRun"); ref != nil {
				return []string{nsKey(obj.(*batchv1.Job).Namespace, ref.Name)}, nil
			}
			return nil, nil
		}}))
		c.pods[ns] = factory.Core().V1().Pods().Informer()
		utilruntime.Must(c.pods[ns].AddIndexers(cache.Indexers{byJob: func(obj any) ([]string, error) {
			if ref := controllerOf(obj.(*corev1.Pod).OwnerReferences, "Job"); ref != nil {
				return []string{nsKey(obj.(*corev1.Pod).Namespace, ref.Name)}, nil
			}
			return nil, nil
		}}))
		c.addHandlers(ns)
		for _, inf := range []cache.SharedIndexInformer{c.runs[ns], c.agentDefs[ns], c.orchRuns[ns], c.orchs[ns], c.jobs[ns], c.pods[ns]} {
			go inf.RunWithContext(ctx)
			synced = append(synced, inf.HasSynced)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before the caches filled
	}
	c.limits.seed(c.allRuns())
	log.Info("caches synced; reconciling", "namespaces", c.cfg.Namespaces, "workers", c.cfg.Workers)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) { c.work(ctx, c.runQ, "AgentRun", c.reconcileAgentRun) }, time.Second)
		})
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) { c.work(ctx, c.orchQ, "OrchestrationRun", c.reconcileOrchestrationRun) }, time.Second)
		})
	}
	<-ctx.Done()
	c.runQ.ShutDown()
	c.orchQ.ShutDown()
	wg.Wait()
	return nil
}

// result tells the worker when to look at the object again without an event.
type result struct{ after time.Duration }

// work processes queue items until the queue shuts down.
func (c *Controller) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], kind string,
	reconcile func(ctx context.Context, ns, name string) (result, error)) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		func() {
			defer q.Done(key)
			if c.observe != nil {
				defer c.observe(kind + "/" + key)()
			}
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			ctx, span := c.tracer.Start(ctx, "Reconcile "+kind, trace.WithAttributes(
				attribute.String("k8s.namespace.name", ns), attribute.String("k8s.object.name", name)))
			defer span.End()
			start := time.Now()
			res, err := reconcile(ctx, ns, name)
			var w *waiting
			if errors.As(err, &w) {
				c.d.Metrics.observeReconcile(kind, time.Since(start), nil)
				q.AddRateLimited(key)
				return
			}
			c.d.Metrics.observeReconcile(kind, time.Since(start), err)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				logging.FromContext(ctx).Warn("reconcile failed; retrying with backoff", "kind", kind, "object", key, "err", err)
				q.AddRateLimited(key)
				return
			}
			q.Forget(key)
			if res.after > 0 {
				q.AddAfter(key, res.after)
			}
		}()
	}
}

func (c *Controller) addHandlers(ns string) {
	enqueueRun := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.runQ.Add(key)
		}
	}
	onRun := func(old, obj any) {
		ar, ok := obj.(*agentsv1alpha1.AgentRun)
		if !ok {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				ar, _ = t.Obj.(*agentsv1alpha1.AgentRun)
			}
		}
		if ar == nil {
			return
		}
		key := nsKey(ar.Namespace, ar.Name)
		c.runQ.Add(key)
		if isTerminal(ar.Status.Phase) && c.limits.release(key) {
			c.wakeQueued()
		}
		if ref := controllerOf(ar.OwnerReferences, "OrchestrationRun"); ref != nil {
			c.orchQ.Add(nsKey(ar.Namespace, ref.Name))
		}
	}
	_, _ = c.runs[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onRun(nil, obj) },
		UpdateFunc: onRun,
		DeleteFunc: func(obj any) {
			onRun(nil, obj)
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil && c.limits.release(key) {
				c.wakeQueued()
			}
		},
	})
	_, _ = c.agentDefs[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueIndexed(c.runs[ns], c.runQ, byAgent, obj) },
		UpdateFunc: func(_, obj any) { c.enqueueIndexed(c.runs[ns], c.runQ, byAgent, obj) },
	})
	_, _ = c.orchRuns[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueKey(c.orchQ, obj) },
		UpdateFunc: func(_, obj any) { c.enqueueKey(c.orchQ, obj) },
		DeleteFunc: func(obj any) { c.enqueueKey(c.orchQ, obj) },
	})
	_, _ = c.orchs[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueIndexed(c.orchRuns[ns], c.orchQ, byOrchestration, obj) },
		UpdateFunc: func(_, obj any) { c.enqueueIndexed(c.orchRuns[ns], c.orchQ, byOrchestration, obj) },
	})
	onJob := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if j, ok := obj.(*batchv1.Job); ok {
			if ref := controllerOf(j.OwnerReferences, "AgentRun"); ref != nil {
				c.runQ.Add(nsKey(j.Namespace, ref.Name))
			}
		}
	}
	_, _ = c.jobs[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onJob, UpdateFunc: func(_, obj any) { onJob(obj) }, DeleteFunc: onJob,
	})
	onPod := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if run := p.Labels[agentsv1alpha1.LabelAgentRun]; run != "" {
			// The label may be shortened for long names; the Job's owner is authoritative.
			if ref := controllerOf(p.OwnerReferences, "Job"); ref != nil {
				if j, ok := c.job(p.Namespace, ref.Name); ok {
					onJob(j)
					return
				}
			}
			enqueueRun(nsKey(p.Namespace, run))
		}
	}
	_, _ = c.pods[ns].AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) },
	})
}

func (c *Controller) enqueueKey(q workqueue.TypedRateLimitingInterface[string], obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		q.Add(key)
	}
}

// enqueueIndexed enqueues every object of inf whose index names obj (an Agent or Orchestration).
func (c *Controller) enqueueIndexed(inf cache.SharedIndexInformer, q workqueue.TypedRateLimitingInterface[string], index string, obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	items, _ := inf.GetIndexer().ByIndex(index, nsKey(m.GetNamespace(), m.GetName()))
	for _, it := range items {
		c.enqueueKey(q, it)
	}
}

func metaOf(obj any) (metav1.Object, error) {
	if m, ok := obj.(metav1.Object); ok {
		return m, nil
	}
	return nil, fmt.Errorf("%T has no object metadata", obj)
}

// controllerOf is the owner reference of the given kind that controls the object.
func controllerOf(refs []metav1.OwnerReference, kind string) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Kind == kind && refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

// Cache lookups.

func (c *Controller) run(ns, name string) (*agentsv1alpha1.AgentRun, bool) {
	return get[*agentsv1alpha1.AgentRun](c.runs[ns], ns, name)
}
func (c *Controller) agent(ns, name string) (*agentsv1alpha1.Agent, bool) {
	return get[*agentsv1alpha1.Agent](c.agentDefs[ns], ns, name)
}
func (c *Controller) orchRun(ns, name string) (*orchv1alpha1.OrchestrationRun, bool) {
	return get[*orchv1alpha1.OrchestrationRun](c.orchRuns[ns], ns, name)
}
func (c *Controller) orchestration(ns, name string) (*orchv1alpha1.Orchestration, bool) {
	return get[*orchv1alpha1.Orchestration](c.orchs[ns], ns, name)
}
func (c *Controller) job(ns, name string) (*batchv1.Job, bool) {
	return get[*batchv1.Job](c.jobs[ns], ns, name)
}

func get[T any](inf cache.SharedIndexInformer, ns, name string) (T, bool) {
	var zero T
	if inf == nil {
		return zero, false
	}
	obj, ok, err := inf.GetStore().GetByKey(nsKey(ns, name))
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// jobsOf lists the Jobs a run controls, from the cache.
func (c *Controller) jobsOf(ns, run string) []*batchv1.Job {
	items, _ := c.jobs[ns].GetIndexer().ByIndex(byOwnerRun, nsKey(ns, run))
	out := make([]*batchv1.Job, 0, len(items))
	for _, it := range items {
		out = append(out, it.(*batchv1.Job))
	}
	return out
}

// podRunning reports whether a pod of the Job has run (is Running, or already finished).
func (c *Controller) podRunning(j *batchv1.Job) bool {
	if j.Status.Ready != nil && *j.Status.Ready > 0 {
		return true
	}
	items, _ := c.pods[j.Namespace].GetIndexer().ByIndex(byJob, nsKey(j.Namespace, j.Name))
	for _, it := range items {
		switch it.(*corev1.Pod).Status.Phase {
		case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
			return true
		}
	}
	return false
}

// allRuns lists every AgentRun in the caches.
func (c *Controller) allRuns() []*agentsv1alpha1.AgentRun {
	var out []*agentsv1alpha1.AgentRun
	for _, inf := range c.runs {
		for _, obj := range inf.GetStore().List() {
			out = append(out, obj.(*agentsv1alpha1.AgentRun))
		}
	}
	return out
}
