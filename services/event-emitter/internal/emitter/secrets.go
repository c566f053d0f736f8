package emitter

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/redact"
)

// secretCache remembers the values of Secrets for a short while, so a storm of events about one
// run reads its Secrets once. Which Secrets a run names comes from an informer over the watched
// namespaces' AgentRuns (see WatchRuns), else from a GET of the run.
type secretCache struct {
	kube kubernetes.Interface
	ttl  time.Duration
	mu   sync.Mutex
	vals map[string]cachedSecret
	// runs: the watched namespaces' AgentRuns, cut down to what redaction reads, once filled.
	runs map[string]cache.Store
	// reads counts where a run's Secret names came from (informer or api).
	reads *prometheus.CounterVec
}

type cachedSecret struct {
	values []string
	at     time.Time
}

func newSecretCache(kube kubernetes.Interface, ttl time.Duration, reads *prometheus.CounterVec) *secretCache {
	return &secretCache{kube: kube, ttl: ttl, vals: map[string]cachedSecret{}, reads: reads}
}

// cachedRun is the informer's copy of the run ref names, nil when there is none or it is
// another object of the same name (the informer has not seen the new one yet).
func (c *secretCache) cachedRun(ref corev1.ObjectReference) *unstructured.Unstructured {
	c.mu.Lock()
	st := c.runs[ref.Namespace]
	c.mu.Unlock()
	if st == nil {
		return nil
	}
	item, ok, _ := st.GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return nil
	}
	obj, ok := item.(*unstructured.Unstructured)
	if !ok || (ref.UID != "" && obj.GetUID() != ref.UID) {
		return nil
	}
	return obj
}

// watchRuns fills c.runs from one informer per namespace, each run cut down to its name, UID
// and the Secrets it names (spec.secrets, secret volumes), and returns when ctx ends. Until
// the caches have filled, and for runs elsewhere, the run is read from the API server.
func (c *secretCache) watchRuns(ctx context.Context, dyn dynamic.Interface, namespaces []string) {
	stores := map[string]cache.Store{}
	var synced []cache.InformerSynced
	var factories []dynamicinformer.DynamicSharedInformerFactory
	for _, ns := range namespaces {
		if _, dup := stores[ns]; dup || ns == "" {
			continue
		}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
		inf := f.ForResource(agentsv1alpha1.GroupVersion.WithResource("agentruns")).Informer()
		utilruntime.Must(inf.SetTransform(secretRefsOnly))
		stores[ns] = inf.GetStore()
		synced = append(synced, inf.HasSynced)
		factories = append(factories, f)
		f.Start(ctx.Done())
	}
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	c.mu.Lock()
	c.runs = stores
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.runs = nil
	c.mu.Unlock()
}

// secretNames lists the Secrets an AgentRun names: spec.secrets and the secret volumes of its
// workload and of each workflow step.
func secretNames(u *unstructured.Unstructured) []string {
	names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "secrets")
	addVolumes := func(vols []any) {
		for _, v := range vols {
			if m, ok := v.(map[string]any); ok {
				if s, ok := m["secretName"].(string); ok && s != "" && !slices.Contains(names, s) {
					names = append(names, s)
				}
			}
		}
	}
	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "workload", "volumes")
	addVolumes(vols)
	steps, _, _ := unstructured.NestedSlice(u.Object, "spec", "workflow", "steps")
	for _, st := range steps {
		if m, ok := st.(map[string]any); ok {
			vols, _, _ := unstructured.NestedSlice(m, "workload", "volumes")
			addVolumes(vols)
		}
	}
	return names
}

// secretRefsOnly is the informer's transform: a run keeps its identity, the OrchestrationRun it is
// a step of (its label) and the names of the Secrets it references (all of them, under
// spec.secrets), nothing else, so the cache costs little per run.
func secretRefsOnly(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	if or := u.GetLabels()[agentsv1alpha1.LabelOrchestrationRun]; or != "" {
		out.SetLabels(map[string]string{agentsv1alpha1.LabelOrchestrationRun: or})
	}
	if names := secretNames(u); len(names) > 0 {
		_ = unstructured.SetNestedStringSlice(out.Object, names, "spec", "secrets")
	}
	return out, nil
}

// runsOf returns the AgentRuns whose Secrets an event about ref may quote: the run itself, or
// an OrchestrationRun's step runs (whose messages its own carry).
func (c *secretCache) runsOf(ctx context.Context, dyn dynamic.Interface, ref corev1.ObjectReference) []*unstructured.Unstructured {
	runs := dyn.Resource(agentsv1alpha1.GroupVersion.WithResource("agentruns")).Namespace(ref.Namespace)
	switch {
	case ref.Kind == "AgentRun" && ref.APIVersion == agentsv1alpha1.GroupVersion.String():
		if obj := c.cachedRun(ref); obj != nil {
			c.reads.WithLabelValues("informer").Inc()
			return []*unstructured.Unstructured{obj}
		}
		c.reads.WithLabelValues("api").Inc()
		obj, err := runs.Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return []*unstructured.Unstructured{obj}
	case ref.Kind == "OrchestrationRun" && ref.APIVersion == orchv1alpha1.GroupVersion.String():
		if steps, ok := c.cachedSteps(ref); ok {
			c.reads.WithLabelValues("informer").Inc()
			return steps
		}
		c.reads.WithLabelValues("api").Inc()
		l, err := runs.List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelOrchestrationRun + "=" + ref.Name})
		if err != nil {
			return nil
		}
		out := make([]*unstructured.Unstructured, 0, len(l.Items))
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out
	}
	return nil
}

// cachedSteps are the informer's step runs of the OrchestrationRun ref names; ok is false when
// its namespace is not watched.
func (c *secretCache) cachedSteps(ref corev1.ObjectReference) ([]*unstructured.Unstructured, bool) {
	c.mu.Lock()
	st := c.runs[ref.Namespace]
	c.mu.Unlock()
	if st == nil {
		return nil, false
	}
	var out []*unstructured.Unstructured
	for _, item := range st.List() {
		if u, ok := item.(*unstructured.Unstructured); ok && u.GetNamespace() == ref.Namespace && u.GetLabels()[agentsv1alpha1.LabelOrchestrationRun] == ref.Name {
			out = append(out, u)
		}
	}
	return out, true
}

// redactorFor returns a redactor that also removes the values of every Secret the object
// references (an AgentRun's, or an OrchestrationRun's step runs': spec.secrets, secret volumes,
// workflow steps' secret volumes), in every form redact.New knows. A Secret that cannot be read
// is skipped: the shape rules still apply.
func (c *secretCache) redactorFor(ctx context.Context, dyn dynamic.Interface, ref corev1.ObjectReference) *redact.Redactor {
	if dyn == nil {
		return redact.New()
	}
	var values []string
	for _, run := range c.runsOf(ctx, dyn, ref) {
		for _, n := range secretNames(run) {
			values = append(values, c.get(ctx, ref.Namespace, n)...)
		}
	}
	return redact.New(values...)
}

func (c *secretCache) get(ctx context.Context, ns, name string) []string {
	key := ns + "/" + name
	c.mu.Lock()
	if v, ok := c.vals[key]; ok && time.Since(v.at) < c.ttl {
		c.mu.Unlock()
		return v.values
	}
	c.mu.Unlock()
	var values []string
	if s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		for _, b := range s.Data {
			values = append(values, string(b))
		}
		for _, v := range s.StringData {
			values = append(values, v)
		}
	}
	c.mu.Lock()
	if len(c.vals) > 1024 {
		c.vals = map[string]cachedSecret{}
	}
	c.vals[key] = cachedSecret{values: values, at: time.Now()}
	c.mu.Unlock()
	return values
}
