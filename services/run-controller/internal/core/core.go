// Package core is what run-controller's two reconcilers (packages agentrun and
// orchestrationrun) share: the configuration and admission policy, the informers' caches they
// read, and the one way each writes status (through status-writer) and events (through
// event-emitter). The wiring (package wiring) builds a Core, fills its caches and hands it to
// both.
package core

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/redact"
	"github.com/agentplane/agentplane/libs/statusclient"
)

// Result tells the worker when to look at the object again without an event.
type Result = scaffold.Result

// Index names of the informers (the wiring registers them).
const (
	ByAgent         = "agent"         // AgentRuns by namespace/agentRef.name
	ByOrchestration = "orchestration" // OrchestrationRuns by namespace/orchestrationRef.name
	ByJob           = "job"           // pods by namespace/owning Job name
	ByOwnerRun      = "owner-run"     // Jobs by namespace/owning AgentRun name
)

// FieldManager is the field manager of everything run-controller creates.
const FieldManager = "agentplane-run-controller"

// Core is the state both reconcilers share.
type Core struct {
	Cfg      Config
	Kube     kubernetes.Interface
	Metadata metadata.Interface
	// Client is the generated clientset of the agentplane API groups.
	Client  versioned.Interface
	Status  statusclient.Writer
	Events  eventclient.Emitter
	Metrics *Metrics
	// Informers by namespace.
	Runs, Agents, OrchRuns, Orchs, Jobs, Pods map[string]cache.SharedIndexInformer
	// Now is the clock (tests move it).
	Now func() time.Time

	mu sync.Mutex
	// warned remembers the last Warning reason emitted per object, so that a run waiting on the
	// same problem does not emit on every reconcile.
	warned map[string]string
	// created holds the AgentRuns this process created that the AgentRun informer has not
	// shown yet, by namespace/name, for CreatedTTL (Created, Seen, RunOrCreated).
	created *utilcache.Expiring
}

// CreatedTTL is how long an AgentRun this process created stands in for the cache's: the
// informer shows a new object well within it, and a created object it never shows (deleted
// before its first event reached the informer) is looked for again after it.
const CreatedTTL = time.Minute

// New is a Core with empty informer maps and the real clock.
func New(cfg Config, kube kubernetes.Interface, md metadata.Interface, client versioned.Interface,
	status statusclient.Writer, events eventclient.Emitter, m *Metrics) *Core {
	c := &Core{
		Cfg: cfg, Kube: kube, Metadata: md, Client: client, Status: status, Events: events, Metrics: m,
		Runs: map[string]cache.SharedIndexInformer{}, Agents: map[string]cache.SharedIndexInformer{},
		OrchRuns: map[string]cache.SharedIndexInformer{}, Orchs: map[string]cache.SharedIndexInformer{},
		Jobs: map[string]cache.SharedIndexInformer{}, Pods: map[string]cache.SharedIndexInformer{},
		Now: time.Now, warned: map[string]string{},
	}
	c.created = c.NewExpiring()
	return c
}

// NewExpiring is an expiring map on the Core's clock (Now, which tests move): what the
// controller remembers for a while of what its caches do not show yet.
func (c *Core) NewExpiring() *utilcache.Expiring {
	return scaffold.NewExpiring(func() time.Time { return c.Now() })
}

// NsKey is the namespace/name key of an object.
func NsKey(ns, name string) string { return ns + "/" + name }

// ControllerOf is the owner reference of the given kind that controls the object.
var ControllerOf = scaffold.ControllerOf

// Run is the AgentRun ns/name in the cache.
func (c *Core) Run(ns, name string) (*agentsv1alpha1.AgentRun, bool) {
	return scaffold.Get[*agentsv1alpha1.AgentRun](c.Runs[ns], ns, name)
}

// Created records ar, which this process has just created (or found it had created): until
// the AgentRun informer shows it (Seen) or CreatedTTL passes, RunOrCreated returns it where the
// cache has nothing yet, so a reconcile woken before the informer caught up does not create it
// again (a wasted start claim, create and GET per step on a busy API server).
func (c *Core) Created(ar *agentsv1alpha1.AgentRun) {
	c.created.Set(NsKey(ar.Namespace, ar.Name), ar, CreatedTTL)
}

// Seen drops what Created recorded for the AgentRun ns/name: the informer has shown it (an
// event for it reached the handlers, after the cache was updated), or its deletion.
func (c *Core) Seen(ns, name string) { c.created.Delete(NsKey(ns, name)) }

// RunOrCreated is the AgentRun ns/name in the cache or, while the cache has not shown it yet,
// the one this process created (Created) less than CreatedTTL ago.
func (c *Core) RunOrCreated(ns, name string) (*agentsv1alpha1.AgentRun, bool) {
	if ar, ok := c.Run(ns, name); ok {
		c.Seen(ns, name)
		return ar, true
	}
	if v, ok := c.created.Get(NsKey(ns, name)); ok {
		return v.(*agentsv1alpha1.AgentRun), true
	}
	return nil, false
}

// Agent is the Agent ns/name in the cache.
func (c *Core) Agent(ns, name string) (*agentsv1alpha1.Agent, bool) {
	return scaffold.Get[*agentsv1alpha1.Agent](c.Agents[ns], ns, name)
}

// OrchRun is the OrchestrationRun ns/name in the cache.
func (c *Core) OrchRun(ns, name string) (*orchv1alpha1.OrchestrationRun, bool) {
	return scaffold.Get[*orchv1alpha1.OrchestrationRun](c.OrchRuns[ns], ns, name)
}

// Orchestration is the Orchestration ns/name in the cache.
func (c *Core) Orchestration(ns, name string) (*orchv1alpha1.Orchestration, bool) {
	return scaffold.Get[*orchv1alpha1.Orchestration](c.Orchs[ns], ns, name)
}

// Job is the Job ns/name in the cache.
func (c *Core) Job(ns, name string) (*batchv1.Job, bool) {
	return scaffold.Get[*batchv1.Job](c.Jobs[ns], ns, name)
}

// JobsOf lists the Jobs a run controls, from the cache.
func (c *Core) JobsOf(ns, run string) []*batchv1.Job {
	return scaffold.ByIndex[*batchv1.Job](c.Jobs[ns], ByOwnerRun, NsKey(ns, run))
}

// PodRunning reports whether a pod of the Job has run (is Running, or already finished).
func (c *Core) PodRunning(j *batchv1.Job) bool {
	if j.Status.Ready != nil && *j.Status.Ready > 0 {
		return true
	}
	items, _ := c.Pods[j.Namespace].GetIndexer().ByIndex(ByJob, NsKey(j.Namespace, j.Name))
	for _, it := range items {
		switch it.(*corev1.Pod).Status.Phase {
		case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
			return true
		}
	}
	return false
}

// AllRuns lists every AgentRun in the caches.
func (c *Core) AllRuns() []*agentsv1alpha1.AgentRun {
	var out []*agentsv1alpha1.AgentRun
	for _, inf := range c.Runs {
		for _, obj := range inf.GetStore().List() {
			out = append(out, obj.(*agentsv1alpha1.AgentRun))
		}
	}
	return out
}

// WarnOnce reports whether what differs from the last problem warned about for key, and
// remembers it.
func (c *Core) WarnOnce(key, what string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warned[key] == what {
		return false
	}
	c.warned[key] = what
	return true
}

// ForgetWarnings drops what WarnOnce remembers for key (the object is gone).
func (c *Core) ForgetWarnings(key string) {
	c.mu.Lock()
	delete(c.warned, key)
	c.mu.Unlock()
}

// IsTerminal reports whether a run's phase is final.
func IsTerminal(phase string) bool {
	switch phase {
	case agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed, agentsv1alpha1.PhaseCancelled:
		return true
	}
	return false
}

// Problem is why a run cannot go on: it fails (a spec that will not work as written) or waits
// (for an Agent or Secret to appear, or for a permission to be granted).
type Problem struct {
	Reason, Message string
	Fail            bool
}

func (p *Problem) Error() string { return p.Reason + ": " + p.Message }

// LogProblem logs, once per distinct problem (WarnOnce), why a run failed or waits: the status
// and the event say it too, but an operator reading the controller's log should not have to
// look elsewhere. The message is redacted as status-writer redacts it.
func LogProblem(ctx context.Context, kind, key, phase, reason, message string) {
	verb := "waits"
	if phase == agentsv1alpha1.PhaseFailed {
		verb = "failed"
	}
	logging.FromContext(ctx).Warn(kind+" "+verb, "object", key, "phase", phase, "reason", reason, "message", redact.String(message))
}

// EventReason maps a status reason onto the stable event reasons.
func EventReason(r string) string {
	if reasons.Known(r) {
		return r
	}
	return reasons.InvalidSpec
}

// APIMessage is the API server's message of err (its Status), or err's text.
func APIMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

// PolicyNotReady reports whether err is an admission policy that kube-apiserver could not set up,
// rather than one that judged the object. kube-apiserver answers such a request 422 Invalid
// ("ValidatingAdmissionPolicy '...' with binding '...' denied request: failed to configure
// binding: failed to find resource referenced by paramKind: ..."), which is what it does for a
// few seconds after it starts, until it has discovered the Agent kind the run policies take
// their parameters from; the same request succeeds a moment later. A Job or step created then
// must be retried, not have its run failed as an invalid spec.
func PolicyNotReady(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	m := APIMessage(err)
	return strings.Contains(m, "failed to configure policy: ") || strings.Contains(m, "failed to configure binding: ")
}

// Hash8 is eight hex digits of FNV-1a: short, stable names.
func Hash8(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

var notLabelChar = regexp.MustCompile(`[^a-z0-9.-]+`)

// Shorten makes s a DNS label prefix of at most n characters.
func Shorten(s string, n int) string {
	s = notLabelChar.ReplaceAllString(strings.ToLower(s), "-")
	if len(s) > n {
		s = s[:n]
	}
	return strings.TrimRight(s, "-.")
}

// LabelValue is s when it is a valid label value; longer names are cut and given a hash, so the
// label still tells runs apart (the owner reference stays authoritative).
func LabelValue(s string) string { return agentsv1alpha1.LabelValue(s) }
