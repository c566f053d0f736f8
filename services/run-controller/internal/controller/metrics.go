package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// Metrics are run-controller's own Prometheus metrics; the scaffold (libs/controller) adds the
// reconcile and queue metrics (agentplane_run_controller_reconcile_duration_seconds{kind},
// _reconcile_errors_total{kind}, _reconcile_panics_total{kind}, _queue_depth{kind}) and client-go's.
type Metrics struct {
	jobsCreated  prometheus.Counter
	statusWrites *prometheus.CounterVec
	events       *prometheus.CounterVec
	reg          prometheus.Registerer
}

// NewMetrics registers the metrics on reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
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
	if reg != nil {
		reg.MustRegister(m.jobsCreated, m.statusWrites, m.events)
	}
	return m
}

// bind registers the metrics read from the controller's caches and queues at scrape time.
func (m *Metrics) bind(c *Controller) {
	if m.reg == nil {
		return
	}
	m.reg.MustRegister(
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
