package core

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are run-controller's own Prometheus metrics; the scaffold (libs/controller) adds the
// reconcile and queue metrics (agentplane_run_controller_reconcile_duration_seconds{kind},
// _reconcile_errors_total{kind}, _reconcile_panics_total{kind}, _queue_depth{kind}) and client-go's.
type Metrics struct {
	JobsCreated  prometheus.Counter
	StatusWrites *prometheus.CounterVec
	Events       *prometheus.CounterVec
	// Registry is where they are registered (nil: nowhere).
	Registry prometheus.Registerer
}

// NewMetrics registers the metrics on reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		JobsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentplane_run_controller_jobs_created_total", Help: "Jobs created for AgentRuns.",
		}),
		StatusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_run_controller_status_writes_total", Help: "Status writes sent to status-writer, by kind.",
		}, []string{"kind"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_run_controller_events_total", Help: "Events sent to event-emitter, by reason and its decision.",
		}, []string{"reason", "outcome"}),
		Registry: reg,
	}
	if reg != nil {
		reg.MustRegister(m.JobsCreated, m.StatusWrites, m.Events)
	}
	return m
}
