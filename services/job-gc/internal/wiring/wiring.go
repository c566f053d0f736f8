// Package wiring is job-gc's wiring (seed 002): its configuration (LoadConfig), its start in the
// service runner (Setup), and its controller on the scaffold (New, Run): the informers of
// run-controller's Jobs, of AgentRuns and of OrchestrationRuns, their event handlers, one queue
// per kind, and the metrics.
//
// What each kind's reconcile decides is in the kind's package: job (the job-result finalizer is
// held until the run records the Job's outcome), agentrun (retention, missing Jobs) and
// orchestrationrun (retention, with its step runs and their Jobs).
package wiring

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
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
	"github.com/agentplane/agentplane/services/job-gc/internal/agentrun"
	"github.com/agentplane/agentplane/services/job-gc/internal/archiver"
	"github.com/agentplane/agentplane/services/job-gc/internal/job"
	"github.com/agentplane/agentplane/services/job-gc/internal/orchestrationrun"
)

// Deps are what job-gc talks to. Registry may be nil.
type Deps struct {
	Kube     kubernetes.Interface
	REST     *rest.Config
	Status   statusclient.Writer
	Events   eventclient.Emitter
	Registry prometheus.Registerer
	// Archive is the run archive; nil leaves archiving off (and the archive finalizer released).
	Archive archiver.Store
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// GC is job-gc's controller.
type GC struct {
	cfg        Config
	d          Deps
	client     versioned.Interface // the generated clientset of the agentplane API groups
	jobs, runs map[string]cache.SharedIndexInformer
	orchRuns   map[string]cache.SharedIndexInformer
	ctl        *controller.Controller
	jobQ, runQ *controller.Queue
	orchQ      *controller.Queue
	job        *job.Reconciler
	run        *agentrun.Reconciler
	orch       *orchestrationrun.Reconciler
	archive    *archiver.Archiver // without a Store: archiving is off
	prune      *archivePruner     // the archive's retention; nil: archived runs are kept
}

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
	g := &GC{cfg: cfg, d: d, client: client, jobs: map[string]cache.SharedIndexInformer{}, runs: map[string]cache.SharedIndexInformer{},
		orchRuns: map[string]cache.SharedIndexInformer{}}
	// The runs' namespace is run_namespace: namespace is the scrape target's own (Prometheus keeps
	// the target's and renames a series' namespace to exported_namespace).
	const runNamespaceLabel = "run_namespace"
	released := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_job_gc_holds_released_total", Help: "job-result finalizers released, by why.",
	}, []string{"why"})
	deletions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_job_gc_deletions_total", Help: "Objects job-gc deleted at the end of an AgentRun's or OrchestrationRun's retention, by kind.",
	}, []string{"kind"})
	missing := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_job_gc_missing_jobs_total", Help: "AgentRuns found missing their Job (WorkflowJobMissing), by the runs' namespace.",
	}, []string{runNamespaceLabel})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_job_gc_missing_job_failures_total", Help: "AgentRuns failed with WorkflowJobMissing after the grace period, by the runs' namespace.",
	}, []string{runNamespaceLabel})
	g.job = &job.Reconciler{Jobs: g.jobs, Runs: g.runs, Client: client, Kube: d.Kube, Events: d.Events, Now: d.Now,
		HoldWarning: cfg.HoldWarning, Released: released}
	g.run = &agentrun.Reconciler{Jobs: g.jobs, Runs: g.runs, OrchRuns: g.orchRuns, Client: client, Kube: d.Kube, Status: d.Status, Events: d.Events, Now: d.Now,
		Retention: cfg.Retention, MissingGrace: cfg.MissingGrace, Deletions: deletions, Missing: missing, Failed: failed}
	g.orch = &orchestrationrun.Reconciler{OrchRuns: g.orchRuns, Runs: g.runs, Jobs: g.jobs, Client: client, Kube: d.Kube, Now: d.Now,
		Retention: cfg.OrchRetention, Deletions: deletions}
	g.archive = newArchiver(g, cfg, d) // without d.Archive, it only releases the archive finalizer
	if d.Archive != nil {
		g.job.Archived = func(ar *agentsv1alpha1.AgentRun) bool { return g.archive.IsArchived(ar.UID) }
	}
	g.run.Archive, g.orch.Archive = g.archive, g.archive
	g.ctl = controller.New(controller.Options{Service: "job-gc", Registry: d.Registry, Workers: cfg.Workers})
	g.jobQ = g.ctl.AddQueue("Job", noResult(g.job.Reconcile))
	g.runQ = g.ctl.AddQueue("AgentRun", noResult(g.run.Reconcile))
	g.orchQ = g.ctl.AddQueue("OrchestrationRun", noResult(g.orch.Reconcile))
	g.job.Queue, g.run.Queue, g.orch.Queue = g.jobQ, g.runQ, g.orchQ
	// Every namespace's series exists from the start, so alerts on increase() see the first one.
	for _, ns := range cfg.Namespaces {
		missing.WithLabelValues(ns)
		failed.WithLabelValues(ns)
	}
	for _, kind := range []string{"Job", "AgentRun", "OrchestrationRun"} { // dashboards show 0 rather than no data
		deletions.WithLabelValues(kind)
	}
	if p, ok := d.Archive.(pruner); ok && cfg.ArchiveRetention > 0 {
		g.prune = newArchivePruner(p, cfg, d.Now)
	}
	// The archive's series exist with archiving off too (they read 0), so that dashboards and
	// alerts on them read a series either way.
	if r := d.Registry; r != nil {
		registerArchiveMetrics(r, g.archive, g.prune, cfg.ArchiveRetention)
	}
	if r := d.Registry; r != nil {
		r.MustRegister(released, deletions, missing, failed,
			holdCollector{g.job},
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "agentplane_job_gc_agentrun_retention_seconds",
				Help: "How long a finished AgentRun without spec.ttlSecondsAfterFinished is kept (JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS).",
			}, func() float64 { return cfg.Retention.Seconds() }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "agentplane_job_gc_orchestrationrun_retention_seconds",
				Help: "How long a finished OrchestrationRun without spec.ttlSecondsAfterFinished is kept (JANGAR_AGENTS_CONTROLLER_ORCHESTRATIONRUN_RETENTION_SECONDS).",
			}, func() float64 { return cfg.OrchRetention.Seconds() }),
		)
	}
	return g, nil
}

// Run watches Jobs, AgentRuns and OrchestrationRuns until ctx ends.
func (g *GC) Run(ctx context.Context) error {
	for _, ns := range g.cfg.Namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(g.d.Kube, 0, informers.WithNamespace(ns), informers.WithTransform(kubeclient.DropManagedFields),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = jobresult.Selector
			}))
		g.jobs[ns] = f.Batch().V1().Jobs().Informer()
		utilruntime.Must(g.jobs[ns].AddIndexers(cache.Indexers{job.ByRun: controller.IndexByController("AgentRun")}))
		af := externalversions.NewSharedInformerFactoryWithOptions(g.client, 0, externalversions.WithNamespace(ns),
			externalversions.WithTransform(kubeclient.DropManagedFields))
		g.runs[ns] = af.Agents().V1alpha1().AgentRuns().Informer()
		utilruntime.Must(g.runs[ns].AddIndexers(cache.Indexers{orchestrationrun.ByOrchestrationRun: controller.IndexByController("OrchestrationRun")}))
		g.orchRuns[ns] = af.Orchestration().V1alpha1().OrchestrationRuns().Informer()
		if g.d.Archive != nil {
			// The runs' Events, for the archive's capture (a watch: the API server caches no
			// Events, so a list per run would read the namespace's every Event from etcd).
			g.archive.Events[ns] = archiver.EventInformers(g.d.Kube, ns)
			for _, inf := range g.archive.Events[ns] {
				g.ctl.Watch(inf, nil)
			}
		}
		g.ctl.Watch(g.jobs[ns], controller.Handler(func(j *batchv1.Job, deleted bool) {
			if deleted {
				g.job.Forget(j.UID)
			} else {
				g.jobQ.Add(j.Namespace + "/" + j.Name)
			}
			if ref := job.Owner(j); ref != nil {
				g.runQ.Add(j.Namespace + "/" + ref.Name)
			}
		}))
		g.ctl.Watch(g.runs[ns], controller.Handler(func(ar *agentsv1alpha1.AgentRun, deleted bool) {
			key := ar.Namespace + "/" + ar.Name
			if !deleted {
				g.runQ.Add(key)
			} else {
				g.archive.Forget(ar.UID)
			}
			for _, j := range controller.ByIndex[*batchv1.Job](g.jobs[ar.Namespace], job.ByRun, key) {
				g.jobQ.Add(j.Namespace + "/" + j.Name)
			}
		}))
		g.ctl.Watch(g.orchRuns[ns], controller.Handler(func(or *orchv1alpha1.OrchestrationRun, deleted bool) {
			key := or.Namespace + "/" + or.Name
			if !deleted {
				g.orchQ.Add(key)
				return
			}
			g.archive.Forget(or.UID)
			// Its step runs, if any outlived it, are orphans now: their own retention applies.
			for _, ar := range controller.ByIndex[*agentsv1alpha1.AgentRun](g.runs[or.Namespace], orchestrationrun.ByOrchestrationRun, key) {
				g.runQ.Add(ar.Namespace + "/" + ar.Name)
			}
		}))
	}
	// The archive's retention runs beside the controller, under the same leadership, and has
	// stopped when Run returns.
	ctx, stop := context.WithCancel(ctx)
	var pruning sync.WaitGroup
	defer pruning.Wait()
	defer stop()
	if g.prune != nil {
		pruning.Go(func() { g.prune.run(ctx) })
	}
	return g.ctl.Run(ctx, func(ctx context.Context) {
		logging.FromContext(ctx).Info("caches synced; guarding Job results", "namespaces", g.cfg.Namespaces,
			"retention", g.cfg.Retention, "orchestrationRunRetention", g.cfg.OrchRetention, "missingJobGrace", g.cfg.MissingGrace, "holdWarning", g.cfg.HoldWarning,
			"archiveRetention", g.cfg.ArchiveRetention)
	})
}

// noResult adapts a reconcile that schedules its own look-again (AddAfter) to the scaffold's.
func noResult(fn func(context.Context, string) error) controller.Reconciler {
	return func(ctx context.Context, key string) (controller.Result, error) {
		return controller.Result{}, fn(ctx, key)
	}
}

// holdCollector reports the hold gauges from one pass over the Job cache per scrape.
type holdCollector struct{ r *job.Reconciler }

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
	s := c.r.Holds()
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(s.Held))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, s.Oldest.Seconds())
	ch <- prometheus.MustNewConstMetric(overdueDesc, prometheus.GaugeValue, float64(s.Overdue))
}
