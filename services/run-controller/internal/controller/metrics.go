package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// Metrics are run-controller's Prometheus metrics.
type Metrics struct {
	reconciles    *prometheus.HistogramVec
	reconcileErrs *prometheus.CounterVec
	jobsCreated   prometheus.Counter
	statusWrites  *prometheus.CounterVec
	events        *prometheus.CounterVec
	reg           prometheus.Registerer
}

// NewMetrics registers the metrics on reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reconciles: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentplane_run_controller_reconcile_duration_seconds", Help: "Time one reconcile took, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"kind"}),
		reconcileErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_run_controller_reconcile_errors_total", Help: "Reconciles that failed and were retried with backoff, by kind.",
		}, []string{"kind"}),
		jobsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentplane_run_controller_jobs_created_total", Help: "Jobs created for AgentRuns.",
		}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_run_controller_status_writes_total", Help: "Status writes sent to status-writer, by kind.",
		}, []string{"kind"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_run_controller_events_total", Help: "Events sent to event-emitter, by reason and its decision.",
		}, []string{"reason", "outcome"}),
		reg: reg,
	}
	for _, kind := range []string{"AgentRun", "OrchestrationRun"} { // series exist before the first error, for alerts
		m.reconcileErrs.WithLabelValues(kind)
	}
	if reg != nil {
		reg.MustRegister(m.reconciles, m.reconcileErrs, m.jobsCreated, m.statusWrites, m.events)
	}
	return m
}

func (m *Metrics) observeReconcile(kind string, d time.Duration, err error) {
	m.reconciles.WithLabelValues(kind).Observe(d.Seconds())
	if err != nil {
		m.reconcileErrs.WithLabelValues(kind).Inc()
	}
}

// bind registers the metrics read from the controller's caches and queues at scrape time.
func (m *Metrics) bind(c *Controller) {
	if m.reg == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentplane_run_controller_queue_depth", Help: "Items waiting in the work queue.",
			ConstLabels: prometheus.Labels{"kind": "AgentRun"}}, func() float64 { return float64(c.runQ.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentplane_run_controller_queue_depth", Help: "Items waiting in the work queue.",
			ConstLabels: prometheus.Labels{"kind": "OrchestrationRun"}}, func() float64 { return float64(c.orchQ.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentplane_run_controller_active_runs",
			Help: "Runs counted against the concurrency limits (started, not finished)."}, func() float64 { return float64(c.limits.activeCount()) }),
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
	for _, ar := range p.c.allRuns() {
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
