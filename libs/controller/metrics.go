package controller

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// metrics are one controller's reconcile metrics, named for its service
// (agentplane_<service>_reconcile_duration_seconds{kind}, ..._reconcile_errors_total{kind},
// ..._reconcile_panics_total{kind}, ..._queue_depth{kind}), beside client-go's own work queue and
// REST client metrics, which every controller of the process shares.
type metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	panics   *prometheus.CounterVec
	depth    *prometheus.GaugeVec

	mu     sync.Mutex
	queues []*Queue
}

func newMetrics(service string, reg prometheus.Registerer) *metrics {
	prefix := "agentplane_" + strings.NewReplacer("-", "_", ".", "_").Replace(service) + "_"
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: prefix + "reconcile_duration_seconds", Help: "Time one reconcile took, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "reconcile_errors_total", Help: "Reconciles that failed and were retried with backoff, by kind (a panic counts too).",
		}, []string{"kind"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "reconcile_panics_total", Help: "Reconciles that panicked (recovered, retried with backoff), by kind.",
		}, []string{"kind"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: prefix + "queue_depth", Help: "Items waiting in the work queue, by kind.",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.errors, m.panics, depthCollector{m})
		registerClientGo(reg)
	}
	return m
}

// addQueue makes q's series exist before its first reconcile (alerts on increase() see the
// first error) and its depth readable at scrape time.
func (m *metrics) addQueue(q *Queue) {
	m.errors.WithLabelValues(q.kind)
	m.panics.WithLabelValues(q.kind)
	m.mu.Lock()
	m.queues = append(m.queues, q)
	m.mu.Unlock()
}

func (m *metrics) observe(kind string, d time.Duration, failed bool) {
	m.duration.WithLabelValues(kind).Observe(d.Seconds())
	if failed {
		m.errors.WithLabelValues(kind).Inc()
	}
}

// depthCollector reads each queue's length when scraped.
type depthCollector struct{ m *metrics }

func (d depthCollector) Describe(ch chan<- *prometheus.Desc) { d.m.depth.Describe(ch) }

func (d depthCollector) Collect(ch chan<- prometheus.Metric) {
	d.m.mu.Lock()
	for _, q := range d.m.queues {
		d.m.depth.WithLabelValues(q.kind).Set(float64(q.Len()))
	}
	d.m.mu.Unlock()
	d.m.depth.Collect(ch)
}

// client-go's work queue metrics (workqueue_*{name}) and REST client metrics
// (rest_client_requests_total{code,method,host}, rest_client_request_duration_seconds{verb,host}).
var (
	clientGoOnce sync.Once
	clientGo     = []prometheus.Collector{
		wqDepth, wqAdds, wqLatency, wqWork, wqUnfinished, wqLongest, wqRetries, restRequests, restLatency,
	}
	wqDepth   = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the work queue."}, []string{"name"})
	wqAdds    = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the work queue."}, []string{"name"})
	wqLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds",
		Help: "How long an item stays in the work queue before it is taken.", Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10)}, []string{"name"})
	wqWork = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds",
		Help: "How long processing an item from the work queue takes.", Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10)}, []string{"name"})
	wqUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds",
		Help: "Seconds of work in progress not yet observed by work_duration (large values: stuck workers)."}, []string{"name"})
	wqLongest = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds",
		Help: "Seconds the longest-running processor of the work queue has been running."}, []string{"name"})
	wqRetries    = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries handled by the work queue."}, []string{"name"})
	restRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
		Help: "API server requests, by status code, method and host."}, []string{"code", "method", "host"})
	restLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
		Help: "API server request latency, by verb and host.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"verb", "host"})
)

// registerClientGo hands client-go the REST client metrics (once per process: client-go takes
// only the first, and a test binary that links controller-runtime has given it that package's)
// and registers the collectors on reg. Each queue is given the work queue metrics itself
// (AddQueue), whatever else registered a global provider.
func registerClientGo(reg prometheus.Registerer) {
	clientGoOnce.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{RequestLatency: restLatencyMetric{}, RequestResult: restResultMetric{}})
	})
	for _, c := range clientGo {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				panic(err)
			}
		}
	}
}

type wqProvider struct{}

func (wqProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return wqDepth.WithLabelValues(name)
}
func (wqProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return wqAdds.WithLabelValues(name)
}
func (wqProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return wqLatency.WithLabelValues(name)
}
func (wqProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return wqWork.WithLabelValues(name)
}
func (wqProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return wqUnfinished.WithLabelValues(name)
}
func (wqProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return wqLongest.WithLabelValues(name)
}
func (wqProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return wqRetries.WithLabelValues(name)
}

type restLatencyMetric struct{}

func (restLatencyMetric) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	restLatency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type restResultMetric struct{}

func (restResultMetric) Increment(_ context.Context, code, method, host string) {
	restRequests.WithLabelValues(code, method, host).Inc()
}
