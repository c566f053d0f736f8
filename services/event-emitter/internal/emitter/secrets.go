package emitter

import (
	"context"
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

// secretRefsOnly is the informer's transform: a run keeps its identity and the names of the
// Secrets it references, nothing else, so the cache costs little per run.
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
	if names, ok, _ := unstructured.NestedStringSlice(u.Object, "spec", "secrets"); ok {
		_ = unstructured.SetNestedStringSlice(out.Object, names, "spec", "secrets")
	}
	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "workload", "volumes")
	var kept []any
	for _, v := range vols {
		if m, ok := v.(map[string]any); ok {
			if s, ok := m["secretName"].(string); ok && s != "" {
				kept = append(kept, map[string]any{"secretName": s})
			}
		}
	}
	if kept != nil {
		_ = unstructured.SetNestedSlice(out.Object, kept, "spec", "workload", "volumes")
	}
	return out, nil
}

// redactorFor returns a redactor that also removes the values of every Secret the object
// references (an AgentRun's spec.secrets and secret volumes). A Secret that cannot be read is
// skipped: the shape rules still apply.
func (c *secretCache) redactorFor(ctx context.Context, dyn dynamic.Interface, ref corev1.ObjectReference) *redact.Redactor {
	if dyn == nil || ref.Kind != "AgentRun" || ref.APIVersion != agentsv1alpha1.GroupVersion.String() {
		return redact.New()
	}
	obj := c.cachedRun(ref)
	if obj == nil {
		c.reads.WithLabelValues("api").Inc()
		var err error
		obj, err = dyn.Resource(agentsv1alpha1.GroupVersion.WithResource("agentruns")).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return redact.New()
		}
	} else {
		c.reads.WithLabelValues("informer").Inc()
	}
	names, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "secrets")
	vols, _, _ := unstructured.NestedSlice(obj.Object, "spec", "workload", "volumes")
	for _, v := range vols {
		if m, ok := v.(map[string]any); ok {
			if s, ok := m["secretName"].(string); ok && s != "" {
				names = append(names, s)
			}
		}
	}
	var values []string
	for _, n := range names {
		values = append(values, c.get(ctx, ref.Namespace, n)...)
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
