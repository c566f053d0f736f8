package writer

import "github.com/prometheus/client_golang/prometheus"

// Metrics are status-writer's Prometheus metrics.
type Metrics struct {
	writes    *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	apiWrites *prometheus.CounterVec
	conflicts *prometheus.CounterVec
	coalesced *prometheus.CounterVec
	reads     *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg (nil: a private registry, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_status_writes_total",
			Help: "WriteStatus requests by kind and outcome (written, invalid, not_found, precondition, conflict, error).",
		}, []string{"kind", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentplane_status_write_duration_seconds",
			Help:    "Time from a WriteStatus request to its reply, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"kind"}),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_status_api_writes_total",
			Help: "Status subresource updates sent to the API server, by kind.",
		}, []string{"kind"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_status_write_conflicts_total",
			Help: "Status updates refused with a resourceVersion conflict and retried, by kind.",
		}, []string{"kind"}),
		coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_status_coalesced_requests_total",
			Help: "Requests that shared an API write with an earlier request for the same object, by kind.",
		}, []string{"kind"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_status_object_reads_total",
			Help: "Where a write found the object it starts from, by kind and source: written (as this writer last wrote it), informer (the watched namespaces' caches) or api (a GET: a cache miss, a conflict, or a refusal judged again on the live object).",
		}, []string{"kind", "source"}),
	}
	// The error series exist from the start, so alerts on rate() see the first failed write.
	for kind := range kinds {
		m.writes.WithLabelValues(kind, "error")
		m.conflicts.WithLabelValues(kind)
		m.coalesced.WithLabelValues(kind)
	}
	reg.MustRegister(m.writes, m.latency, m.apiWrites, m.conflicts, m.coalesced, m.reads)
	return m
}
