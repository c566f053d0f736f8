// Package writer is status-writer: the one writer of .status for agentplane's CRDs. Every write
// goes through the status contract (libs/status), through the status subresource, under
// optimistic concurrency; concurrent requests for one object are coalesced into fewer API writes.
package writer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/status"
)

// Errors a write fails with, besides the contract's status.ErrInvalid and status.ErrPrecondition.
var (
	ErrNotFound = errors.New("object not found")
	// ErrConflict: the object kept changing under the writer for every attempt.
	ErrConflict = errors.New("too many conflicting updates")
)

const tracerName = "github.com/agentplane/agentplane/services/status-writer"

// DefaultFieldManager owns the status fields status-writer writes.
const DefaultFieldManager = "agentplane-status-writer"

// Request is one status write.
type Request struct {
	Kind, Namespace, Name string
	// UID, when set, must match the live object.
	UID          string
	Contract     status.Request
	Fields       map[string]any
	FieldManager string
	// Claim: refuse when the object's spec.cancel is true (see the proto's
	// WriteStatusRequest.claim). A claim without a phase keeps phase, reason, message,
	// observedGeneration and conditions; one with a phase writes Contract too.
	Claim bool
}

// Result is the status as written.
type Result struct {
	Status          map[string]any
	ResourceVersion string
	Generation      int64
	// Coalesced is true when the API write carried other requests too.
	Coalesced bool
}

// Writer writes statuses. It is safe for concurrent use.
type Writer struct {
	client     dynamic.Interface
	maxRetries int
	now        func() time.Time
	metrics    *Metrics

	mu      sync.Mutex
	objects map[objectKey]*queue
	// last holds the object as last written, so that a writer's next write needs no read: every
	// write is guarded by resourceVersion, a stale copy only costs a conflict and a re-read. In a
	// watched namespace an entry lives until the informer has seen the write (see Watch).
	last map[objectKey]*unstructured.Unstructured
	// stores are the informers' caches of the watched namespaces, once filled (see Watch).
	stores map[storeKey]cache.Store
}

// maxCached bounds the write-through cache. Only objects outside the watched namespaces stay
// in it beyond a moment, so the bound is reached only when most writes go there.
const maxCached = 4096

type objectKey struct{ kind, namespace, name string }

// queue holds the requests waiting for one object; one goroutine (the leader) writes them.
type queue struct {
	pending []*call
}

type call struct {
	req    Request
	kind   *kind
	extra  map[string]any
	result Result
	err    error
	done   chan struct{}
	// span is the caller's span: the write that carries this call is traced under the first
	// call's span and linked to the others', so a caller's trace reaches the API server.
	span trace.SpanContext
}

// Options configure a Writer.
type Options struct {
	// MaxRetries bounds the attempts on a resourceVersion conflict (default 5).
	MaxRetries int
	Metrics    *Metrics
	Now        func() time.Time
}

// New returns a Writer that talks to the API server through client.
func New(client dynamic.Interface, o Options) *Writer {
	if o.MaxRetries <= 0 {
		o.MaxRetries = 5
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Writer{client: client, maxRetries: o.MaxRetries, now: o.Now, metrics: o.Metrics, objects: map[objectKey]*queue{}, last: map[objectKey]*unstructured.Unstructured{}}
}

// Write validates req, then writes it, possibly together with concurrent requests for the same
// object. It returns when the write that carries req has finished or ctx ends; a request whose
// caller gave up may still be written.
func (w *Writer) Write(ctx context.Context, req Request) (Result, error) {
	k, ok := kinds[req.Kind]
	if !ok {
		return Result{}, fmt.Errorf("%w: kind %q is not one of %s", status.ErrInvalid, req.Kind, kindNames())
	}
	if req.Namespace == "" || req.Name == "" {
		return Result{}, fmt.Errorf("%w: object namespace and name are required", status.ErrInvalid)
	}
	if err := k.checkContractFields(req.Contract); err != nil {
		return Result{}, fmt.Errorf("%w: %w", status.ErrInvalid, err)
	}
	extra, err := k.decodeExtra(req.Fields)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", status.ErrInvalid, err)
	}
	if req.FieldManager == "" {
		req.FieldManager = DefaultFieldManager
	}
	c := &call{req: req, kind: k, extra: extra, done: make(chan struct{}), span: trace.SpanContextFromContext(ctx)}
	w.enqueue(c) //nolint:contextcheck // a batch serves many callers and outlives each one's context; it runs detached, linked to each caller's span
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (k *kind) checkContractFields(r status.Request) error {
	if !k.hasPhase && r.Phase != "" {
		return fmt.Errorf("%s status has no phase", k.name)
	}
	if !k.hasRunFields && (r.Reason != "" || r.Message != "") {
		return fmt.Errorf("%s status has no reason or message; use a condition", k.name)
	}
	return nil
}

func (w *Writer) enqueue(c *call) {
	key := objectKey{c.req.Kind, c.req.Namespace, c.req.Name}
	w.mu.Lock()
	q, running := w.objects[key]
	if !running {
		q = &queue{}
		w.objects[key] = q
	}
	q.pending = append(q.pending, c)
	w.mu.Unlock()
	if !running {
		// The first caller writes its own batch on its own goroutine (no hand-off on the common,
		// uncontended path); whatever queued meanwhile is led on from a new goroutine.
		if w.writeNext(key, q) {
			go w.lead(key, q)
		}
	}
}

// lead writes batches for one object until no request is pending. Requests that arrive while a
// write is in flight form the next batch, so N concurrent requests cost far fewer than N writes
// and the latest request is always applied last.
func (w *Writer) lead(key objectKey, q *queue) {
	for w.writeNext(key, q) {
	}
}

// writeNext writes the pending batch, if any, and reports whether it wrote one. When nothing is
// pending it retires the queue, so the next request starts a new leader.
func (w *Writer) writeNext(key objectKey, q *queue) bool {
	w.mu.Lock()
	batch := q.pending
	q.pending = nil
	if len(batch) == 0 {
		delete(w.objects, key)
		w.mu.Unlock()
		return false
	}
	w.mu.Unlock()
	w.writeBatch(key, batch)
	for _, c := range batch {
		close(c.done)
	}
	return true
}

// cached is the newest copy of the object this writer holds: as it last wrote it, else the
// informer's; nil when it has neither. Copies are handed out: cached objects are never mutated.
func (w *Writer) cached(key objectKey, k *kind) *unstructured.Unstructured {
	w.mu.Lock()
	defer w.mu.Unlock()
	if obj := w.last[key]; obj != nil {
		w.metrics.reads.WithLabelValues(k.name, "written").Inc()
		return obj.DeepCopy()
	}
	if st := w.stores[storeKey{k.resource, key.namespace}]; st != nil {
		if item, ok, _ := st.GetByKey(key.namespace + "/" + key.name); ok {
			if obj, ok := item.(*unstructured.Unstructured); ok {
				w.metrics.reads.WithLabelValues(k.name, "informer").Inc()
				return obj.DeepCopy()
			}
		}
	}
	return nil
}

func (w *Writer) remember(key objectKey, obj *unstructured.Unstructured) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if obj == nil {
		delete(w.last, key)
		return
	}
	if st := w.stores[storeKey{kinds[key.kind].resource, key.namespace}]; st != nil {
		// The informer may have seen this very write before the reply came back: then its copy
		// is as new, and a copy kept here would never be dropped by observed.
		if item, ok, _ := st.GetByKey(key.namespace + "/" + key.name); ok {
			if cur, ok := item.(*unstructured.Unstructured); ok && cur.GetResourceVersion() == obj.GetResourceVersion() {
				delete(w.last, key)
				return
			}
		}
	}
	if len(w.last) >= maxCached {
		for k := range w.last {
			delete(w.last, k)
			if len(w.last) < maxCached/2 {
				break
			}
		}
	}
	w.last[key] = obj
}

// batchSpan starts the span of a batch's write: a child of its first request's, linked to the
// others'.
func batchSpan(batch []*call) (context.Context, trace.Span) {
	var links []trace.Link
	for _, c := range batch[1:] {
		if c.span.IsValid() {
			links = append(links, trace.Link{SpanContext: c.span})
		}
	}
	return otel.Tracer(tracerName).Start(trace.ContextWithSpanContext(context.Background(), batch[0].span), "Write batch",
		trace.WithLinks(links...), trace.WithAttributes(attribute.Int("agentplane.batch.size", len(batch))))
}

// delivered caches the written object and gives each applied request its result.
func (w *Writer) delivered(key objectKey, k *kind, written *unstructured.Unstructured, applied []*call) {
	written.SetManagedFields(nil) // never sent back, so not worth copying
	w.remember(key, written)      // never mutated: cached() hands out copies
	st, _, _ := unstructured.NestedMap(written.Object, "status")
	for _, c := range applied {
		c.result = Result{Status: st, ResourceVersion: written.GetResourceVersion(), Generation: written.GetGeneration(), Coalesced: len(applied) > 1}
	}
	if len(applied) > 1 {
		w.metrics.coalesced.WithLabelValues(k.name).Add(float64(len(applied) - 1))
	}
}

func (w *Writer) writeBatch(key objectKey, batch []*call) {
	first := batch[0]
	k := first.kind
	ctx, span := batchSpan(batch)
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := w.client.Resource(k.resource).Namespace(first.req.Namespace)
	fail := func(err error) {
		for _, c := range batch {
			c.err = err
		}
	}
	obj := w.cached(key, k)
	fresh := false
	for attempt := 0; attempt < w.maxRetries; attempt++ {
		if obj == nil {
			var err error
			w.metrics.reads.WithLabelValues(k.name, "api").Inc()
			obj, err = res.Get(ctx, first.req.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				w.remember(key, nil)
				fail(fmt.Errorf("%w: %s %s/%s", ErrNotFound, k.name, first.req.Namespace, first.req.Name))
				return
			}
			if err != nil {
				fail(fmt.Errorf("read %s %s/%s: %w", k.name, first.req.Namespace, first.req.Name, err))
				return
			}
			fresh = true
		}
		applied, err := w.applyBatch(obj, batch)
		if err != nil {
			fail(err)
			return
		}
		if !fresh && len(applied) < len(batch) {
			// A refusal judged on a cached copy may be stale (a spec edit raised the generation,
			// the object was recreated): judge again on the live object.
			obj = nil
			continue
		}
		if len(applied) == 0 {
			return // every request was refused by the contract; nothing to write
		}
		// managedFields left out of an update are kept by the API server; not sending them
		// makes every write smaller.
		obj.SetManagedFields(nil)
		w.metrics.apiWrites.WithLabelValues(k.name).Inc()
		written, err := res.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: applied[len(applied)-1].req.FieldManager})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				w.metrics.conflicts.WithLabelValues(k.name).Inc()
			}
			obj, fresh = nil, false
			w.remember(key, nil)
			continue
		}
		if err != nil {
			w.remember(key, nil)
			for _, c := range applied {
				c.err = fmt.Errorf("write %s %s/%s status: %w", k.name, first.req.Namespace, first.req.Name, err)
			}
			return
		}
		w.delivered(key, k, written, applied)
		return
	}
	fail(fmt.Errorf("%w: %s %s/%s changed under %d attempts; retry the request", ErrConflict, k.name, first.req.Namespace, first.req.Name, w.maxRetries))
}

// applyBatch applies each request in order onto obj's status through the contract. Refused
// requests get their error and are skipped; the rest are returned.
func (w *Writer) applyBatch(obj *unstructured.Unstructured, batch []*call) ([]*call, error) {
	st, _, err := unstructured.NestedMap(obj.Object, "status")
	if err != nil {
		return nil, fmt.Errorf("read status of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	if st == nil {
		st = map[string]any{}
	}
	cur, err := contractFields(st)
	if err != nil {
		return nil, fmt.Errorf("current status of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	var applied []*call
	for _, c := range batch {
		c.err = nil
		if c.req.UID != "" && types.UID(c.req.UID) != obj.GetUID() {
			c.err = fmt.Errorf("%w: %s %s/%s has UID %s, not %s (it was deleted and recreated)",
				status.ErrPrecondition, c.kind.name, obj.GetNamespace(), obj.GetName(), obj.GetUID(), c.req.UID)
			continue
		}
		contract := c.req.Contract
		if c.req.Claim {
			if cancelled, _, _ := unstructured.NestedBool(obj.Object, "spec", "cancel"); cancelled && !cancelRefused(st) {
				c.err = fmt.Errorf("%w: %s %s/%s is cancelled (spec.cancel is true): nothing more may start for it",
					status.ErrPrecondition, c.kind.name, obj.GetNamespace(), obj.GetName())
				continue
			}
			if contract.Phase == "" {
				contract = status.Request{ObservedGeneration: max(cur.ObservedGeneration, 1), Reason: cur.Reason, Message: cur.Message}
			}
		}
		next, err := status.Apply(cur, obj.GetGeneration(), contract, c.kind.phases, w.now())
		if err != nil {
			c.err = err
			continue
		}
		cur = next
		for name, v := range c.extra {
			if v == nil {
				delete(st, name)
			} else {
				st[name] = v
			}
		}
		applied = append(applied, c)
	}
	if len(applied) == 0 {
		return nil, nil
	}
	if err := setContractFields(st, cur, applied[0].kind); err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedMap(obj.Object, st, "status"); err != nil {
		return nil, err
	}
	return applied, nil
}

// contractJSON carries the contract's fields by their JSON names, common to every kind.
type contractJSON struct {
	Phase              string             `json:"phase,omitempty"`
	Reason             string             `json:"reason,omitempty"`
	Message            string             `json:"message,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	UpdatedAt          *metav1.MicroTime  `json:"updatedAt,omitempty"`
	StartedAt          *metav1.Time       `json:"startedAt,omitempty"`
	FinishedAt         *metav1.Time       `json:"finishedAt,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

func contractFields(st map[string]any) (status.Fields, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return status.Fields{}, err
	}
	var c contractJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return status.Fields{}, err
	}
	return status.Fields(c), nil
}

// setContractFields writes f into st; fields a kind does not have are left out, so that the API
// server never prunes anything silently.
func setContractFields(st map[string]any, f status.Fields, k *kind) error {
	raw, err := json.Marshal(contractJSON(f))
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	for _, name := range []string{"phase", "reason", "message", "observedGeneration", "updatedAt", "startedAt", "finishedAt", "conditions"} {
		delete(st, name)
	}
	for name, v := range m {
		switch name {
		case "phase":
			if !k.hasPhase {
				continue
			}
		case "reason", "message", "startedAt", "finishedAt":
			if !k.hasRunFields {
				continue
			}
		}
		st[name] = v
	}
	return nil
}

// cancelRefused reports whether a status's conditions say its run's cancel was refused because
// cancel support was off (agentsv1alpha1.CancelRefused): such a run goes on, and may still start.
func cancelRefused(st map[string]any) bool {
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == reasons.CondCancelled {
			return m["status"] == string(metav1.ConditionFalse) && m["reason"] == reasons.CancelDisabled
		}
	}
	return false
}
