package emitter

import "github.com/prometheus/client_golang/prometheus"

// Metrics are event-emitter's Prometheus metrics.
type Metrics struct {
	decisions *prometheus.CounterVec
	writes    *prometheus.CounterVec
	dropped   prometheus.Counter
	runReads  *prometheus.CounterVec
	// RedisSeconds times each Redis decision; Fallback is 1 while Redis is unreachable.
	RedisSeconds prometheus.Histogram
	Fallback     prometheus.Gauge
}

// NewMetrics registers the metrics with reg (nil: a private registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_events_total",
			Help: "Emit requests by reason and outcome (emitted, counted, rate_limited, suppressed, disabled, dropped).",
		}, []string{"reason", "outcome"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_events_api_writes_total",
			Help: "Event creates and series updates sent to the API server, by API and result.",
		}, []string{"api", "result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentplane_events_queue_dropped_total",
			Help: "Events dropped because the write queue was full.",
		}),
		runReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_events_run_reads_total",
			Help: "Where an AgentRun event's Secret names (for redaction) came from: informer (the watched namespaces' cache) or api (a GET).",
		}, []string{"source"}),
		RedisSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentplane_events_redis_seconds",
			Help:    "Latency of one rate-limit decision in Redis, from the call to the answer (a wait for a shared round trip included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		Fallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentplane_events_fallback_active",
			Help: "1 while Redis is unreachable and decisions use the bounded in-process buckets.",
		}),
	}
	reg.MustRegister(m.decisions, m.writes, m.dropped, m.runReads, m.RedisSeconds, m.Fallback)
	return m
}
