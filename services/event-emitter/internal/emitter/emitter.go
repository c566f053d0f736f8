// Package emitter turns reconcile failures into Kubernetes Events (seed 001): it validates and
// decides at once (rate limit, transient suppression, series), answers the caller, and writes to
// the API server afterwards from a bounded queue, so callers never wait on Kubernetes.
package emitter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/services/event-emitter/internal/limiter"
)

// ErrInvalid marks a malformed request.
var ErrInvalid = errors.New("invalid event")

// Outcome is what happened to one Emit.
type Outcome int

const (
	// Emitted: a new Event will be written.
	Emitted Outcome = iota
	// Counted: an identical recent Event's series count will be raised.
	Counted
	// RateLimited: the object's bucket is empty (or the write queue is full).
	RateLimited
	// Suppressed: a transient error already reported within the window.
	Suppressed
	// Disabled: JANGAR_CONTROLLER_EVENTS_ENABLED=false.
	Disabled
)

func (o Outcome) String() string {
	return [...]string{"emitted", "counted", "rate_limited", "suppressed", "disabled"}[o]
}

// Event is one request to emit.
type Event struct {
	Regarding           corev1.ObjectReference
	Type                string
	Reason              string
	Note                string
	Action              string
	Transient           bool
	ReportingController string
	ReportingInstance   string
}

// Decider is the rate limiter (limiter.Limiter in production).
type Decider interface {
	Allow(ctx context.Context, object, reason string, transient bool) limiter.Decision
	Degraded() bool
}

// API names the Events API written to.
type API string

const (
	APIAuto     API = "auto"
	APIEventsV1 API = "events.k8s.io/v1"
	APICoreV1   API = "v1"
)

// Config configures an Emitter.
type Config struct {
	Enabled bool
	// API forces an Events API; auto uses events.k8s.io/v1 when the server serves it.
	API API
	// DefaultController and DefaultInstance fill reporting fields a request leaves empty.
	DefaultController string
	DefaultInstance   string
	// QueueSize bounds the events waiting to be written (default 1000).
	QueueSize int
	// SeriesWindow: an identical event within it raises the series count (default 6m, as
	// client-go's events library).
	SeriesWindow time.Duration
}

// Emitter is safe for concurrent use; Run must be running for events to be written.
type Emitter struct {
	cfg     Config
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	limit   Decider
	metrics *Metrics
	queue   chan op
	// unwritten counts the events queued and not yet written (or failed), so that a caller
	// can tell when the writer has caught up.
	unwritten atomic.Int64
	now       func() time.Time

	mu     sync.Mutex
	series map[string]*series
	api    API

	secrets *secretCache
}

type series struct {
	name     string
	count    int32
	first    time.Time
	last     time.Time
	creating bool
}

type op struct {
	key string
	ev  Event
}

// New returns an Emitter. dyn reads the objects events are about, to find the Secrets they
// reference (their values are redacted from notes).
func New(kube kubernetes.Interface, dyn dynamic.Interface, limit Decider, m *Metrics, cfg Config) *Emitter {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1000
	}
	if cfg.SeriesWindow <= 0 {
		cfg.SeriesWindow = 6 * time.Minute
	}
	if cfg.API == "" {
		cfg.API = APIAuto
	}
	if cfg.DefaultController == "" {
		cfg.DefaultController = "agentplane.proompteng.ai/event-emitter"
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Emitter{
		cfg: cfg, kube: kube, dyn: dyn, limit: limit, metrics: m, queue: make(chan op, cfg.QueueSize),
		now: time.Now, series: map[string]*series{}, secrets: newSecretCache(kube, 30*time.Second, m.runReads),
	}
}

// WatchRuns keeps the AgentRuns of namespaces in a small cache (each cut down to the Secrets it
// names), so that redacting an event about a run there reads nothing from the API server; runs
// elsewhere are read with a GET. It returns when ctx ends.
func (e *Emitter) WatchRuns(ctx context.Context, namespaces []string) error {
	if e.dyn != nil {
		e.secrets.watchRuns(ctx, e.dyn, namespaces)
	}
	return nil
}

// Emit decides about ev and queues its write. It never waits on the Kubernetes API.
func (e *Emitter) Emit(ctx context.Context, ev Event) (Outcome, bool, error) {
	if err := e.validate(&ev); err != nil {
		return 0, false, err
	}
	degraded := e.limit.Degraded()
	if !e.cfg.Enabled {
		e.metrics.decisions.WithLabelValues(ev.Reason, Disabled.String()).Inc()
		return Disabled, degraded, nil
	}
	objKey := string(ev.Regarding.UID)
	if objKey == "" {
		objKey = ev.Regarding.Kind + "/" + ev.Regarding.Namespace + "/" + ev.Regarding.Name
	}
	switch e.limit.Allow(ctx, objKey, ev.Reason, ev.Transient) {
	case limiter.RateLimited:
		e.metrics.decisions.WithLabelValues(ev.Reason, RateLimited.String()).Inc()
		return RateLimited, e.limit.Degraded(), nil
	case limiter.Suppressed:
		e.metrics.decisions.WithLabelValues(ev.Reason, Suppressed.String()).Inc()
		return Suppressed, e.limit.Degraded(), nil
	}
	key := seriesKey(ev)
	now := e.now()
	e.mu.Lock()
	outcome := Emitted
	if s := e.series[key]; s != nil && now.Sub(s.last) < e.cfg.SeriesWindow {
		s.count++
		s.last = now
		outcome = Counted
	} else {
		e.series[key] = &series{count: 1, first: now, last: now}
		e.gcSeries(now)
	}
	e.mu.Unlock()
	e.unwritten.Add(1)
	select {
	case e.queue <- op{key: key, ev: ev}:
	default:
		e.unwritten.Add(-1)
		e.metrics.dropped.Inc()
		e.metrics.decisions.WithLabelValues(ev.Reason, "dropped").Inc()
		return RateLimited, e.limit.Degraded(), nil
	}
	e.metrics.decisions.WithLabelValues(ev.Reason, outcome.String()).Inc()
	return outcome, e.limit.Degraded(), nil
}

// gcSeries forgets series past their window; called with mu held.
func (e *Emitter) gcSeries(now time.Time) {
	if len(e.series) < 1024 {
		return
	}
	for k, s := range e.series {
		if now.Sub(s.last) >= e.cfg.SeriesWindow && !s.creating {
			delete(e.series, k)
		}
	}
}

func (e *Emitter) validate(ev *Event) error {
	var errs []error
	r := ev.Regarding
	if r.Kind == "" || r.Name == "" || r.Namespace == "" || r.APIVersion == "" {
		errs = append(errs, errors.New("object api_version, kind, namespace and name are required"))
	}
	if ev.Type != corev1.EventTypeNormal && ev.Type != corev1.EventTypeWarning {
		errs = append(errs, fmt.Errorf("type %q must be Normal or Warning", ev.Type))
	}
	if !reasons.Known(ev.Reason) {
		errs = append(errs, fmt.Errorf("reason %q is not one of the stable reasons in libs/reasons", ev.Reason))
	}
	if ev.Action == "" {
		ev.Action = "Reconcile"
	}
	if len(ev.Action) > 128 {
		errs = append(errs, errors.New("action is longer than 128 characters"))
	}
	if ev.ReportingController == "" {
		ev.ReportingController = e.cfg.DefaultController
	}
	if msgs := validation.IsQualifiedName(ev.ReportingController); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("reporting_controller %q: %s", ev.ReportingController, msgs[0]))
	}
	if ev.ReportingInstance == "" {
		ev.ReportingInstance = e.cfg.DefaultInstance
	}
	if ev.ReportingInstance == "" || len(ev.ReportingInstance) > 128 {
		errs = append(errs, errors.New("reporting_instance is required, at most 128 characters"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// seriesKey identifies isomorphic events: same object, type, reason, action, note and reporter.
func seriesKey(ev Event) string {
	h := sha256.New()
	r := ev.Regarding
	for _, s := range []string{string(r.UID), r.Kind, r.Namespace, r.Name, ev.Type, ev.Reason, ev.Action, ev.Note, ev.ReportingController} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
