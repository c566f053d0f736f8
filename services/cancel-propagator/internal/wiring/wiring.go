// Package wiring runs cancel-propagator (seed 003): Setup reads its configuration and dials its
// backends; New builds the controller on the scaffold (libs/controller) with one queue per kind
// it reconciles, OrchestrationRun (package orchestrationrun) and AgentRun (package agentrun),
// both following the cancel protocol (package cancel); Run starts the informers on the runs, their
// Jobs and pods, whose events enqueue a cancelled run whenever it, or anything under it, changes
// (a step's AgentRun brings back its OrchestrationRun, a Job or pod its AgentRun).
package wiring

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/api/client/informers/externalversions"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/agentrun"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/orchestrationrun"
)

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
	protocol   *cancel.Protocol // the state and metrics both kinds' reconcilers share
	or         *orchestrationrun.Reconciler
	ar         *agentrun.Reconciler
	// observe, when set (by tests), is called as the cancel of a queue key starts, and what it
	// returns when it ends.
	observe func(key string) func()
	synced  atomic.Bool // the informers' caches have synced (Run)
}

const (
	kindOR = cancel.KindOrchestrationRun
	kindAR = cancel.KindAgentRun
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
		cfg: cfg, d: d, client: client,
		ors: map[string]cache.SharedIndexInformer{}, ars: map[string]cache.SharedIndexInformer{},
		jobs: map[string]cache.SharedIndexInformer{}, pods: map[string]cache.SharedIndexInformer{},
	}
	p.protocol = cancel.New(cancel.Options{Enabled: cfg.Enabled, Timeout: cfg.Timeout, Kube: d.Kube, Dynamic: d.Dynamic,
		Status: d.Status, Events: d.Events, Registry: d.Registry, Now: d.Now, EnqueueAfter: p.enqueueAfter})
	p.or = &orchestrationrun.Reconciler{Protocol: p.protocol, Client: client, Kube: d.Kube, OrchestrationRuns: p.ors, AgentRuns: p.ars, Jobs: p.jobs, Pods: p.pods}
	p.ar = &agentrun.Reconciler{Protocol: p.protocol, Kube: d.Kube, OrchestrationRuns: p.ors, AgentRuns: p.ars, Jobs: p.jobs, Pods: p.pods}
	p.ctl = controller.New(controller.Options{Service: "cancel-propagator", Registry: d.Registry, Workers: cfg.Workers,
		Observe: func(k string) func() {
			if p.observe == nil {
				return func() {}
			}
			return p.observe(k)
		}})
	p.orQ = p.ctl.AddQueue(kindOR, reconciler(p.or.Reconcile))
	p.arQ = p.ctl.AddQueue(kindAR, reconciler(p.ar.Reconcile))
	return p, nil
}

// enqueue adds the run named by k (cancel.Key) to its kind's queue.
func (p *Propagator) enqueue(k string) { p.enqueueAfter(k, 0) }

// enqueueAfter adds the run named by k (cancel.Key) to its kind's queue after d.
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

// reconciler adapts a kind's Reconcile of a queue key ("<namespace>/<name>") to the scaffold's.
func reconciler(fn func(ctx context.Context, key string) error) controller.Reconciler {
	return func(ctx context.Context, k string) (controller.Result, error) {
		return controller.Result{}, fn(ctx, k)
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
			externalversions.WithTransform(kubeclient.DropManagedFields))
		p.ors[ns] = ours.Orchestration().V1alpha1().OrchestrationRuns().Informer()
		p.ars[ns] = ours.Agents().V1alpha1().AgentRuns().Informer()
		utilruntime.Must(p.ars[ns].AddIndexers(cache.Indexers{cancel.ByOwner: controller.IndexByController(kindOR)}))
		f := informers.NewSharedInformerFactoryWithOptions(p.d.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kubeclient.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = jobresult.Selector }))
		p.jobs[ns] = f.Batch().V1().Jobs().Informer()
		utilruntime.Must(p.jobs[ns].AddIndexers(cache.Indexers{cancel.ByOwner: controller.IndexByController(kindAR)}))
		p.pods[ns] = f.Core().V1().Pods().Informer()
		utilruntime.Must(p.pods[ns].AddIndexers(cache.Indexers{cancel.ByJobUID: func(obj any) ([]string, error) {
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
			p.enqueue(cancel.Key(kindOR, or.Namespace, or.Name))
		}
	}
	onAR := func(obj any) {
		ar, ok := unwrap(obj).(*agentsv1alpha1.AgentRun)
		if !ok {
			return
		}
		if ar.Spec.Cancel {
			p.enqueue(cancel.Key(kindAR, ar.Namespace, ar.Name))
		}
		if ref := controllerRef(ar.OwnerReferences, kindOR); ref != nil {
			p.enqueue(cancel.Key(kindOR, ar.Namespace, ref.Name))
		}
	}
	onJob := func(obj any) {
		if j, ok := unwrap(obj).(*batchv1.Job); ok {
			if ref := controllerRef(j.OwnerReferences, kindAR); ref != nil {
				p.enqueue(cancel.Key(kindAR, j.Namespace, ref.Name))
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
			if k, ok := p.protocol.RunOfJob(ref.UID); ok {
				p.enqueue(k)
			} else if o, ok, _ := p.jobs[ns].GetStore().GetByKey(ns + "/" + ref.Name); ok {
				onJob(o)
			}
		}
	}
	// A run deleted: forget what this process kept about it.
	forget := func(obj any) {
		if m, ok := unwrap(obj).(metav1.Object); ok {
			p.protocol.Forget(m.GetUID())
		}
	}
	for inf, fn := range map[cache.SharedIndexInformer]func(any){p.ors[ns]: onOR, p.ars[ns]: onAR, p.jobs[ns]: onJob, p.pods[ns]: onPod} {
		del := fn
		switch inf {
		case p.ors[ns], p.ars[ns]:
			del = func(o any) { forget(o); fn(o) }
		case p.pods[ns], p.jobs[ns]:
			del = func(o any) { // gone: forget that this process deleted it
				switch x := unwrap(o).(type) {
				case *corev1.Pod:
					p.protocol.ForgetPod(x.UID)
				case *batchv1.Job:
					p.protocol.ForgetJob(x.UID)
				}
				fn(o)
			}
		}
		p.ctl.Watch(inf, cache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) }, DeleteFunc: del,
		})
	}
}
