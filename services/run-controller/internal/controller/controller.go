// Package controller is run-controller: it turns AgentRuns into Jobs and OrchestrationRuns into
// AgentRuns, on the controller scaffold (libs/controller): informers from the generated clients
// feed one rate-limited work queue per kind, workers reconcile one object at a time from the
// caches (level-triggered: every reconcile recomputes from what exists), and nothing polls the
// API server. Status is written only through status-writer and events only through event-emitter.
//
// One reconcile function per kind: reconcileAgentRun (agentrun.go) and
// reconcileOrchestrationRun (orchestrationrun.go); this file is the wiring.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/api/client/informers/externalversions"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
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
	cfg Config
	d   Deps
	// client is the generated clientset of the agentplane API groups.
	client versioned.Interface
	ctl    *scaffold.Controller

	// Informers by namespace.
	runs, agentDefs, orchRuns, orchs, jobs, pods map[string]cache.SharedIndexInformer

	runQ, orchQ *scaffold.Queue

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
	client, err := versioned.NewForConfig(d.REST)
	if err != nil {
		return nil, fmt.Errorf("run-controller: agentplane clientset: %w", err)
	}
	c := &Controller{
		cfg: cfg, d: d, client: client,
		runs: map[string]cache.SharedIndexInformer{}, agentDefs: map[string]cache.SharedIndexInformer{},
		orchRuns: map[string]cache.SharedIndexInformer{}, orchs: map[string]cache.SharedIndexInformer{},
		jobs: map[string]cache.SharedIndexInformer{}, pods: map[string]cache.SharedIndexInformer{},
		now:    time.Now,
		warned: map[string]string{},
	}
	c.ctl = scaffold.New(scaffold.Options{Service: "run-controller", Registry: d.Metrics.reg, Workers: cfg.Workers,
		Observe: func(key string) func() {
			if c.observe == nil {
				return func() {}
			}
			return c.observe(key)
		}})
	c.runQ = c.ctl.AddQueue("AgentRun", reconciler(c.reconcileAgentRun))
	c.orchQ = c.ctl.AddQueue("OrchestrationRun", reconciler(c.reconcileOrchestrationRun))
	c.limits = newAdmission(cfg.Limits, c.notStartedRuns)
	d.Metrics.bind(c)
	return c, nil
}

func nsKey(ns, name string) string { return ns + "/" + name }

// Run starts the informers, waits for their caches, and reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	for _, ns := range c.cfg.Namespaces {
		ours := externalversions.NewSharedInformerFactoryWithOptions(c.client, 0, externalversions.WithNamespace(ns),
			externalversions.WithTransform(kube.DropManagedFields))
		c.runs[ns] = ours.Agents().V1alpha1().AgentRuns().Informer()
		utilruntime.Must(c.runs[ns].AddIndexers(cache.Indexers{byAgent: func(obj any) ([]string, error) {
			ar := obj.(*agentsv1alpha1.AgentRun)
			return []string{nsKey(ar.Namespace, ar.Spec.AgentRef.Name)}, nil
		}}))
		c.agentDefs[ns] = ours.Agents().V1alpha1().Agents().Informer()
		c.orchRuns[ns] = ours.Orchestration().V1alpha1().OrchestrationRuns().Informer()
		utilruntime.Must(c.orchRuns[ns].AddIndexers(cache.Indexers{byOrchestration: func(obj any) ([]string, error) {
			or := obj.(*orchv1alpha1.OrchestrationRun)
			return []string{nsKey(or.Namespace, or.Spec.OrchestrationRef.Name)}, nil
		}}))
		c.orchs[ns] = ours.Orchestration().V1alpha1().Orchestrations().Informer()
		factory := informers.NewSharedInformerFactoryWithOptions(c.d.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kube.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController
			}))
		c.jobs[ns] = factory.Batch().V1().Jobs().Informer()
		utilruntime.Must(c.jobs[ns].AddIndexers(cache.Indexers{byOwnerRun: scaffold.IndexByController("AgentRun")}))
		c.pods[ns] = factory.Core().V1().Pods().Informer()
		utilruntime.Must(c.pods[ns].AddIndexers(cache.Indexers{byJob: scaffold.IndexByController("Job")}))
		c.watch(ns)
	}
	return c.ctl.Run(ctx, func(ctx context.Context) {
		c.limits.seed(c.allRuns())
		logging.FromContext(ctx).Info("caches synced; reconciling", "namespaces", c.cfg.Namespaces, "workers", c.cfg.Workers)
	})
}

// result tells the worker when to look at the object again without an event.
type result = scaffold.Result

// reconciler adapts a reconcile of (namespace, name) to the scaffold's. A wait for something (a
// slot, a policy, a dependency) comes back as scaffold.Waiting: retried, not counted as a failure.
func reconciler(fn func(ctx context.Context, ns, name string) (result, error)) scaffold.Reconciler {
	return func(ctx context.Context, key string) (result, error) {
		ns, name := scaffold.SplitKey(key)
		return fn(ctx, ns, name)
	}
}

// watch registers ns's informers and what each of their events enqueues.
func (c *Controller) watch(ns string) {
	c.ctl.Watch(c.runs[ns], scaffold.Handler(func(ar *agentsv1alpha1.AgentRun, deleted bool) {
		key := nsKey(ar.Namespace, ar.Name)
		c.runQ.Add(key)
		if (deleted || isTerminal(ar.Status.Phase)) && c.limits.release(key) {
			c.wakeQueued()
		}
		if ref := controllerOf(ar.OwnerReferences, "OrchestrationRun"); ref != nil {
			c.orchQ.Add(nsKey(ar.Namespace, ref.Name))
		}
	}))
	c.ctl.Watch(c.agentDefs[ns], scaffold.EnqueueIndexed(c.runs[ns], byAgent, c.runQ))
	c.ctl.Watch(c.orchRuns[ns], scaffold.EnqueueKey(c.orchQ))
	c.ctl.Watch(c.orchs[ns], scaffold.EnqueueIndexed(c.orchRuns[ns], byOrchestration, c.orchQ))
	onJob := func(j *batchv1.Job) {
		if ref := controllerOf(j.OwnerReferences, "AgentRun"); ref != nil {
			c.runQ.Add(nsKey(j.Namespace, ref.Name))
		}
	}
	c.ctl.Watch(c.jobs[ns], scaffold.Handler(func(j *batchv1.Job, _ bool) { onJob(j) }))
	c.ctl.Watch(c.pods[ns], scaffold.Handler(func(p *corev1.Pod, deleted bool) {
		run := p.Labels[agentsv1alpha1.LabelAgentRun]
		if deleted || run == "" {
			return
		}
		// The label may be shortened for long names; the Job's owner is authoritative.
		if ref := controllerOf(p.OwnerReferences, "Job"); ref != nil {
			if j, ok := c.job(p.Namespace, ref.Name); ok {
				onJob(j)
				return
			}
		}
		c.runQ.Add(nsKey(p.Namespace, run))
	}))
}

// controllerOf is the owner reference of the given kind that controls the object.
var controllerOf = scaffold.ControllerOf

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
	return scaffold.Get[T](inf, ns, name)
}

// jobsOf lists the Jobs a run controls, from the cache.
func (c *Controller) jobsOf(ns, run string) []*batchv1.Job {
	return scaffold.ByIndex[*batchv1.Job](c.jobs[ns], byOwnerRun, nsKey(ns, run))
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
