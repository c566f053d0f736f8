// Package wiring is run-controller's wiring: Setup reads its configuration and dials its
// clients, and the Controller builds the informers (from the generated clients), registers one
// rate-limited work queue per kind on the controller scaffold (libs/controller) and routes each
// informer event to the queues. The reconcilers are elsewhere, one package per kind:
// agentrun.Reconciler.Reconcile (../agentrun/agentrun.go) and
// orchestrationrun.Reconciler.Reconcile (../orchestrationrun/orchestrationrun.go); what they
// share (caches, status and event writes, configuration) is package core.
//
// Level-triggered: every reconcile recomputes from what exists, and nothing polls the API
// server. Status is written only through status-writer and events only through event-emitter.
package wiring

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/services/run-controller/internal/agentrun"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
	"github.com/agentplane/agentplane/services/run-controller/internal/definition"
	"github.com/agentplane/agentplane/services/run-controller/internal/orchestrationrun"
)

// Deps are what the controller talks to.
type Deps struct {
	Kube     kubernetes.Interface
	Metadata metadata.Interface
	// REST is the API server's configuration; typed clients for the agentplane groups are built from it.
	REST    *rest.Config
	Status  statusclient.Writer
	Events  eventclient.Emitter
	Metrics *core.Metrics
}

// Controller reconciles AgentRuns and OrchestrationRuns in its namespaces.
type Controller struct {
	*core.Core
	ctl         *scaffold.Controller
	runQ, orchQ *scaffold.Queue
	// agentQ and defQ: Agents and Orchestrations, for their own status (package definition).
	agentQ, defQ *scaffold.Queue
	runs         *agentrun.Reconciler
	// observe, when set (by tests), is called as a reconcile of "<kind>/<namespace>/<name>"
	// starts, and what it returns when it ends.
	observe func(key string) func()
}

// New builds a controller; Run starts it.
func New(cfg core.Config, d Deps) (*Controller, error) {
	if len(cfg.Namespaces) == 0 {
		return nil, errors.New("run-controller: no namespaces to act in")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if d.Metrics == nil {
		d.Metrics = core.NewMetrics(nil)
	}
	client, err := versioned.NewForConfig(d.REST)
	if err != nil {
		return nil, fmt.Errorf("run-controller: agentplane clientset: %w", err)
	}
	c := &Controller{Core: core.New(cfg, d.Kube, d.Metadata, client, d.Status, d.Events, d.Metrics)}
	c.ctl = scaffold.New(scaffold.Options{Service: "run-controller", Registry: d.Metrics.Registry, Workers: cfg.Workers,
		Observe: func(key string) func() {
			if c.observe == nil {
				return func() {}
			}
			return c.observe(key)
		}})
	c.runs = agentrun.New(c.Core, func(key string) { c.runQ.Add(key) })
	c.runQ = c.ctl.AddQueue("AgentRun", c.transient("AgentRun", c.runs.Reconcile))
	c.orchQ = c.ctl.AddQueue("OrchestrationRun", c.transient("OrchestrationRun", orchestrationrun.New(c.Core).Reconcile))
	defs := definition.New(c.Core)
	c.agentQ = c.ctl.AddQueue("Agent", defs.Agent)
	c.defQ = c.ctl.AddQueue("Orchestration", defs.Orchestration)
	bindMetrics(d.Metrics, c)
	return c, nil
}

// Run starts the informers, waits for their caches, and reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	for _, ns := range c.Cfg.Namespaces {
		ours := externalversions.NewSharedInformerFactoryWithOptions(c.Client, 0, externalversions.WithNamespace(ns),
			externalversions.WithTransform(kubeclient.DropManagedFields))
		c.Runs[ns] = ours.Agents().V1alpha1().AgentRuns().Informer()
		utilruntime.Must(c.Runs[ns].AddIndexers(cache.Indexers{core.ByAgent: func(obj any) ([]string, error) {
			ar := obj.(*agentsv1alpha1.AgentRun)
			return []string{core.NsKey(ar.Namespace, ar.Spec.AgentRef.Name)}, nil
		}}))
		c.Agents[ns] = ours.Agents().V1alpha1().Agents().Informer()
		c.OrchRuns[ns] = ours.Orchestration().V1alpha1().OrchestrationRuns().Informer()
		utilruntime.Must(c.OrchRuns[ns].AddIndexers(cache.Indexers{core.ByOrchestration: func(obj any) ([]string, error) {
			or := obj.(*orchv1alpha1.OrchestrationRun)
			return []string{core.NsKey(or.Namespace, or.Spec.OrchestrationRef.Name)}, nil
		}}))
		c.Orchs[ns] = ours.Orchestration().V1alpha1().Orchestrations().Informer()
		factory := informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kubeclient.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController
			}))
		c.Jobs[ns] = factory.Batch().V1().Jobs().Informer()
		utilruntime.Must(c.Jobs[ns].AddIndexers(cache.Indexers{core.ByOwnerRun: scaffold.IndexByController("AgentRun")}))
		c.Pods[ns] = factory.Core().V1().Pods().Informer()
		utilruntime.Must(c.Pods[ns].AddIndexers(cache.Indexers{core.ByJob: scaffold.IndexByController("Job")}))
		c.watch(ns)
	}
	return c.ctl.Run(ctx, func(ctx context.Context) {
		c.runs.Seed()
		logging.FromContext(ctx).Info("caches synced; reconciling", "namespaces", c.Cfg.Namespaces, "workers", c.Cfg.Workers)
	})
}

// watch registers ns's informers and what each of their events enqueues.
func (c *Controller) watch(ns string) {
	c.ctl.Watch(c.Runs[ns], scaffold.Handler(func(ar *agentsv1alpha1.AgentRun, deleted bool) {
		key := core.NsKey(ar.Namespace, ar.Name)
		c.Seen(ar.Namespace, ar.Name)
		c.runQ.Add(key)
		c.runs.OnEvent(key, ar, deleted)
		if ref := core.ControllerOf(ar.OwnerReferences, "OrchestrationRun"); ref != nil {
			c.orchQ.Add(core.NsKey(ar.Namespace, ref.Name))
		}
	}))
	c.ctl.Watch(c.Agents[ns], scaffold.EnqueueIndexed(c.Runs[ns], core.ByAgent, c.runQ))
	_, err := c.Agents[ns].AddEventHandler(scaffold.EnqueueKey(c.agentQ)) // the Agent's own status
	utilruntime.Must(err)
	c.ctl.Watch(c.OrchRuns[ns], scaffold.EnqueueKey(c.orchQ))
	c.ctl.Watch(c.Orchs[ns], scaffold.EnqueueIndexed(c.OrchRuns[ns], core.ByOrchestration, c.orchQ))
	_, err = c.Orchs[ns].AddEventHandler(scaffold.EnqueueKey(c.defQ)) // the Orchestration's own status
	utilruntime.Must(err)
	onJob := func(j *batchv1.Job) {
		if ref := core.ControllerOf(j.OwnerReferences, "AgentRun"); ref != nil {
			c.runQ.Add(core.NsKey(j.Namespace, ref.Name))
		}
	}
	c.ctl.Watch(c.Jobs[ns], scaffold.Handler(func(j *batchv1.Job, deleted bool) {
		if deleted {
			c.runs.JobDeleted(j)
		}
		onJob(j)
	}))
	c.ctl.Watch(c.Pods[ns], scaffold.Handler(func(p *corev1.Pod, deleted bool) {
		run := p.Labels[agentsv1alpha1.LabelAgentRun]
		if deleted || run == "" {
			return
		}
		// The label may be shortened for long names; the Job's owner is authoritative.
		if ref := core.ControllerOf(p.OwnerReferences, "Job"); ref != nil {
			if j, ok := c.Job(p.Namespace, ref.Name); ok {
				onJob(j)
				return
			}
		}
		c.runQ.Add(core.NsKey(p.Namespace, run))
	}))
}

// bindMetrics registers the metrics read from the controller's caches and queues at scrape time.
func bindMetrics(m *core.Metrics, c *Controller) {
	if m.Registry == nil {
		return
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentplane_run_controller_active_runs",
			Help: "Runs counted against the concurrency limits (started, not finished)."}, func() float64 { return float64(c.runs.Active()) }),
		&phaseCollector{c: c, desc: prometheus.NewDesc("agentplane_run_controller_runs", "AgentRuns in the controller's cache, by phase.", []string{"phase"}, nil)},
	)
}

// phaseCollector counts runs by phase from the cache when scraped.
type phaseCollector struct {
	c    *Controller
	desc *prometheus.Desc
}

func (p *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{agentsv1alpha1.PhasePending: 0, agentsv1alpha1.PhaseRunning: 0, agentsv1alpha1.PhaseSucceeded: 0,
		agentsv1alpha1.PhaseFailed: 0, agentsv1alpha1.PhaseCancelled: 0}
	for _, ar := range p.c.AllRuns() {
		ph := ar.Status.Phase
		if ph == "" {
			ph = agentsv1alpha1.PhasePending
		}
		counts[ph]++
	}
	for ph, n := range counts {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(n), ph)
	}
}
