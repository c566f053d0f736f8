// Package controller is the scaffold every agentplane controller (run-controller, job-gc,
// cancel-propagator) is built on, on client-go alone: shared informers registered with Watch,
// one typed rate-limited work queue per reconciled kind (AddQueue), workers that recover from a
// panic, requeue-after, and one scheme of spans, log attributes and metrics for all of them.
//
// A reconciler is a function of a queue key ("<namespace>/<name>"): it reads what it needs from
// informer caches, acts, and returns a Result (look again after a while) or an error (look again
// with backoff). Waiting(err) marks an error that is not a failure: the key is retried with
// backoff, but no error is logged or counted. docs/adding-a-kind.md is the recipe.
package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/agentplane/agentplane/libs/logging"
	"github.com/prometheus/client_golang/prometheus"
)

// Result tells the worker when to look at the object again without an event (zero: not unless
// something changes).
type Result struct{ RequeueAfter time.Duration }

// Reconciler brings the object named by key ("<namespace>/<name>") to its desired state.
type Reconciler func(ctx context.Context, key string) (Result, error)

// Options configure a Controller.
type Options struct {
	// Service names the service ("run-controller"): its tracer, and its metrics'
	// prefix (agentplane_run_controller_).
	Service string
	// Registry is where the metrics are registered; nil registers none (tests).
	Registry prometheus.Registerer
	// Workers is how many keys of each queue are reconciled at once (default 4).
	Workers int
	// Observe, when set (by tests), is called as a reconcile of "<kind>/<namespace>/<name>"
	// starts, and what it returns when it ends.
	Observe func(key string) func()
}

// Controller runs informers and the work queues fed by them.
type Controller struct {
	opts      Options
	tracer    trace.Tracer
	metrics   *metrics
	informers []cache.SharedIndexInformer
	queues    []*Queue
	started   bool
}

// New builds a controller; register informers (Watch) and queues (AddQueue), then Run it.
func New(opts Options) *Controller {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Service == "" {
		opts.Service = "controller"
	}
	return &Controller{
		opts:    opts,
		tracer:  otel.Tracer("github.com/agentplane/agentplane/services/" + opts.Service),
		metrics: newMetrics(opts.Service, opts.Registry),
	}
}

// Queue is the work queue of one reconciled kind. Add, AddAfter and Len are the client-go
// queue's.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	kind      string
	reconcile Reconciler
}

// Kind is the kind the queue reconciles.
func (q *Queue) Kind() string { return q.kind }

// AddQueue adds the work queue of kind, reconciled by r. Its depth, adds, latency and retries
// are exported as client-go's workqueue metrics named by kind, its reconciles as
// <prefix>_reconcile_duration_seconds{kind}.
func (c *Controller) AddQueue(kind string, r Reconciler) *Queue {
	if c.started {
		panic("controller: AddQueue after Run")
	}
	q := &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: c.opts.Service + "." + strings.ToLower(kind), MetricsProvider: wqProvider{}}),
		kind: kind, reconcile: r,
	}
	c.queues = append(c.queues, q)
	c.metrics.addQueue(q)
	return q
}

// Watch registers an informer: Run starts it and waits for its cache before any worker runs.
// h (nil for none) receives its events; Handler and EnqueueKey build one.
func (c *Controller) Watch(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
	if c.started {
		panic("controller: Watch after Run")
	}
	if h != nil {
		if _, err := inf.AddEventHandler(h); err != nil {
			panic(fmt.Sprintf("controller: add event handler: %v", err)) // only fails on a stopped informer
		}
	}
	c.informers = append(c.informers, inf)
}

// Run starts the informers, waits for their caches, calls synced (nil for none: a seed of
// in-memory state from the caches), and runs the workers until ctx ends; then it shuts the queues
// down and waits for the reconciles in flight. It returns nil when ctx ends, also before the caches
// filled.
func (c *Controller) Run(ctx context.Context, synced func(context.Context)) error {
	c.started = true
	defer func() {
		for _, q := range c.queues {
			q.ShutDown()
		}
	}()
	var has []cache.InformerSynced
	for _, inf := range c.informers {
		go inf.RunWithContext(ctx)
		has = append(has, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), has...) {
		return nil
	}
	if synced != nil {
		synced(ctx)
	}
	var wg sync.WaitGroup
	for _, q := range c.queues {
		for range c.opts.Workers {
			wg.Go(func() {
				wait.UntilWithContext(ctx, func(ctx context.Context) {
					for c.processNext(ctx, q) {
					}
				}, time.Second)
			})
		}
	}
	<-ctx.Done()
	for _, q := range c.queues {
		q.ShutDown()
	}
	wg.Wait()
	return nil
}

// processNext reconciles one key of q; false once q is shut down.
func (c *Controller) processNext(ctx context.Context, q *Queue) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if c.opts.Observe != nil {
		defer c.opts.Observe(q.kind + "/" + key)()
	}
	ns, name := SplitKey(key)
	ctx, span := c.tracer.Start(ctx, "Reconcile "+q.kind, trace.WithAttributes(
		attribute.String("k8s.object.kind", q.kind),
		attribute.String("k8s.namespace.name", ns), attribute.String("k8s.object.name", name)))
	defer span.End()
	start := time.Now()
	res, err := c.reconcile(ctx, q, key)
	waiting := IsWaiting(err)
	c.metrics.observe(q.kind, time.Since(start), err != nil && !waiting)
	switch {
	case waiting:
		q.AddRateLimited(key)
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		logging.FromContext(ctx).Warn("reconcile failed; retrying with backoff", "kind", q.kind, "object", key, "err", err)
		q.AddRateLimited(key)
	default:
		q.Forget(key)
		if res.RequeueAfter > 0 {
			q.AddAfter(key, res.RequeueAfter)
		}
	}
	return true
}

// reconcile calls q's reconciler, turning a panic into an error: one bad object must not take the
// process (and every other object's reconciles) down with it.
func (c *Controller) reconcile(ctx context.Context, q *Queue, key string) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.metrics.panics.WithLabelValues(q.kind).Inc()
			logging.FromContext(ctx).Error("reconcile panicked; retrying with backoff", "kind", q.kind, "object", key,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("reconcile of %s %s panicked: %v", q.kind, key, p)
		}
	}()
	return q.reconcile(ctx, key)
}

// SplitKey is the namespace and name of a queue key ("<namespace>/<name>", or "<name>").
func SplitKey(key string) (namespace, name string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

// Key is the queue key of namespace and name.
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// waiting marks an error as a wait, not a failure.
type waiting struct{ err error }

func (w *waiting) Error() string { return "waiting: " + w.err.Error() }
func (w *waiting) Unwrap() error { return w.err }

// Waiting wraps err (what is awaited) so that the worker retries the key with backoff without
// logging it or counting it as a reconcile error.
func Waiting(err error) error { return &waiting{err} }

// IsWaiting reports whether err, or an error it wraps, came from Waiting.
func IsWaiting(err error) bool {
	var w *waiting
	return errors.As(err, &w)
}
