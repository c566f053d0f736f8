// Package runs feeds the runs stream of watch-gateway: the AgentRuns and OrchestrationRuns of the
// gateway's namespace, each one item of a health.Hub, so the stream has the health stream's
// snapshot, delta and cursor semantics. Items come from informers; changes that arrive close
// together are sent as one delta, and a deleted run is named in the delta's "removed".
//
// An item of the runs stream:
//
//	component  "<Kind>/<name>" (AgentRun/hello, OrchestrationRun/plan-1): the key
//	namespace  the run's namespace
//	status     the run's phase (Pending until one is written)
//	message    the run's status message (redacted)
//	details    kind, name, uid, created, started, finished (RFC 3339), reason, cancel (true once
//	           asked), and: for an AgentRun agent, runtime, orchestration_run and step (when a
//	           step of one), steps (a workflow's [{name, phase}]); for an OrchestrationRun
//	           orchestration and steps ([{name, phase, run}] from stepStatuses)
package runs

import (
	"context"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/api/client/informers/externalversions"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/redact"
)

// Kinds the stream carries.
const (
	KindAgentRun         = "AgentRun"
	KindOrchestrationRun = "OrchestrationRun"
)

// KindOf accepts a kind's name in any case, singular or plural (agentruns, OrchestrationRun).
func KindOf(s string) (string, bool) {
	switch strings.ToLower(s) {
	case "agentrun", "agentruns":
		return KindAgentRun, true
	case "orchestrationrun", "orchestrationruns":
		return KindOrchestrationRun, true
	}
	return "", false
}

// Key is a run's component in the stream.
func Key(kind, name string) string { return kind + "/" + name }

// Source watches the runs of one namespace into a hub.
type Source struct {
	hub       *health.Hub
	namespace string
	batch     time.Duration

	agentRuns, orchRuns cache.SharedIndexInformer

	mu      sync.Mutex
	pending map[string]struct{}
	synced  bool
	timer   *time.Timer
}

// New watches namespace through the generated clientset of the two API groups; changes are
// gathered for batch before each delta.
func New(client versioned.Interface, namespace string, hub *health.Hub, batch time.Duration) (*Source, error) {
	ours := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithNamespace(namespace),
		externalversions.WithTransform(kubeclient.DropManagedFields))
	s := &Source{hub: hub, namespace: namespace, batch: batch, pending: map[string]struct{}{},
		agentRuns: ours.Agents().V1alpha1().AgentRuns().Informer(),
		orchRuns:  ours.Orchestration().V1alpha1().OrchestrationRuns().Informer(),
	}
	for kind, inf := range map[string]cache.SharedIndexInformer{KindAgentRun: s.agentRuns, KindOrchestrationRun: s.orchRuns} {
		enqueue := func(obj any) {
			if m, ok := controller.Unwrap(obj).(metav1.Object); ok {
				s.changed(Key(kind, m.GetName()))
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
		}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run watches until ctx ends. The hub gets every run as one delta once both caches are filled,
// and becomes ready then.
func (s *Source) Run(ctx context.Context) error {
	go s.agentRuns.RunWithContext(ctx)
	go s.orchRuns.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), s.agentRuns.HasSynced, s.orchRuns.HasSynced) {
		return nil
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
	s.flush()
	<-ctx.Done()
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	return nil
}

// changed records that a run changed; the next flush sends it.
func (s *Source) changed(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[key] = struct{}{}
	if s.synced && s.timer == nil {
		s.timer = time.AfterFunc(s.batch, s.flush)
	}
}

// flush sends the pending runs as one delta: their current items, or their removal.
func (s *Source) flush() {
	s.mu.Lock()
	keys := s.pending
	s.pending = map[string]struct{}{}
	s.timer = nil
	s.mu.Unlock()
	var changes []health.Item
	var removed []string
	for key := range keys {
		if it, ok := s.Item(key); ok {
			changes = append(changes, it)
		} else {
			removed = append(removed, key)
		}
	}
	s.hub.Apply(changes, removed)
}

// Item is the stream's item for the run named by key, from the cache.
func (s *Source) Item(key string) (health.Item, bool) {
	if ar, ok := s.AgentRun(nameOf(key, KindAgentRun)); ok {
		return AgentRunItem(ar), true
	}
	if or, ok := s.OrchestrationRun(nameOf(key, KindOrchestrationRun)); ok {
		return OrchestrationRunItem(or), true
	}
	return health.Item{}, false
}

// nameOf is the name in key when key is of kind, else "".
func nameOf(key, kind string) string {
	if len(key) > len(kind)+1 && key[:len(kind)+1] == kind+"/" {
		return key[len(kind)+1:]
	}
	return ""
}

// AgentRun returns the cached AgentRun name.
func (s *Source) AgentRun(name string) (*agentsv1alpha1.AgentRun, bool) {
	if name == "" {
		return nil, false
	}
	obj, ok, err := s.agentRuns.GetStore().GetByKey(s.namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	ar, ok := obj.(*agentsv1alpha1.AgentRun)
	return ar, ok
}

// OrchestrationRun returns the cached OrchestrationRun name.
func (s *Source) OrchestrationRun(name string) (*orchv1alpha1.OrchestrationRun, bool) {
	if name == "" {
		return nil, false
	}
	obj, ok, err := s.orchRuns.GetStore().GetByKey(s.namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	or, ok := obj.(*orchv1alpha1.OrchestrationRun)
	return or, ok
}

func stamp(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func phaseOf(p string) health.Status {
	if p == "" {
		return health.Status(agentsv1alpha1.PhasePending)
	}
	return health.Status(p)
}

// common are the details every run has; values are JSON's own types, so that an item read back
// from the wire compares equal.
func common(kind string, m metav1.ObjectMeta, reason string, started, finished *metav1.Time, cancel bool) map[string]any {
	d := map[string]any{"kind": kind, "name": m.Name, "uid": string(m.UID), "created": stamp(&m.CreationTimestamp)}
	set := func(k, v string) {
		if v != "" {
			d[k] = v
		}
	}
	set("reason", reason)
	set("started", stamp(started))
	set("finished", stamp(finished))
	if cancel {
		d["cancel"] = true
	}
	return d
}

// AgentRunItem is an AgentRun's item.
func AgentRunItem(ar *agentsv1alpha1.AgentRun) health.Item {
	d := common(KindAgentRun, ar.ObjectMeta, ar.Status.Reason, ar.Status.StartedAt, ar.Status.FinishedAt, ar.Spec.Cancel)
	d["agent"] = ar.Spec.AgentRef.Name
	d["runtime"] = ar.Spec.Runtime.Type
	if p := ar.Labels[agentsv1alpha1.LabelOrchestrationRun]; p != "" {
		d["orchestration_run"] = p
		if st := ar.Labels[agentsv1alpha1.LabelOrchestrationStep]; st != "" {
			d["step"] = st
		}
	}
	if ar.Status.Workflow != nil && len(ar.Status.Workflow.Steps) > 0 {
		steps := make([]any, 0, len(ar.Status.Workflow.Steps))
		for _, st := range ar.Status.Workflow.Steps {
			steps = append(steps, map[string]any{"name": st.Name, "phase": st.Phase})
		}
		d["steps"] = steps
	}
	return health.Item{Component: Key(KindAgentRun, ar.Name), Namespace: ar.Namespace, Status: phaseOf(ar.Status.Phase),
		Message: redact.String(ar.Status.Message), Details: d}
}

// OrchestrationRunItem is an OrchestrationRun's item.
func OrchestrationRunItem(or *orchv1alpha1.OrchestrationRun) health.Item {
	d := common(KindOrchestrationRun, or.ObjectMeta, or.Status.Reason, or.Status.StartedAt, or.Status.FinishedAt, or.Spec.Cancel)
	d["orchestration"] = or.Spec.OrchestrationRef.Name
	if len(or.Status.StepStatuses) > 0 {
		steps := make([]any, 0, len(or.Status.StepStatuses))
		for _, st := range or.Status.StepStatuses {
			step := map[string]any{"name": st.Name, "phase": st.Phase}
			if st.ResourceRef != nil && st.ResourceRef.Name != "" {
				step["run"] = st.ResourceRef.Name
			}
			steps = append(steps, step)
		}
		d["steps"] = steps
	}
	return health.Item{Component: Key(KindOrchestrationRun, or.Name), Namespace: or.Namespace, Status: phaseOf(or.Status.Phase),
		Message: redact.String(or.Status.Message), Details: d}
}
