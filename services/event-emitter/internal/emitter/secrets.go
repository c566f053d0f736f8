package emitter

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/redact"
)

// secretCache remembers the values of Secrets for a short while, so a storm of events about one
// run reads its Secrets once.
type secretCache struct {
	kube kubernetes.Interface
	ttl  time.Duration
	mu   sync.Mutex
	vals map[string]cachedSecret
}

type cachedSecret struct {
	values []string
	at     time.Time
}

func newSecretCache(kube kubernetes.Interface, ttl time.Duration) *secretCache {
	return &secretCache{kube: kube, ttl: ttl, vals: map[string]cachedSecret{}}
}

// redactorFor returns a redactor that also removes the values of every Secret the object
// references (an AgentRun's spec.secrets and secret volumes). A Secret that cannot be read is
// skipped: the shape rules still apply.
func (c *secretCache) redactorFor(ctx context.Context, dyn dynamic.Interface, ref corev1.ObjectReference) *redact.Redactor {
	if dyn == nil || ref.Kind != "AgentRun" || ref.APIVersion != agentsv1alpha1.GroupVersion.String() {
		return redact.New()
	}
	obj, err := dyn.Resource(agentsv1alpha1.GroupVersion.WithResource("agentruns")).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return redact.New()
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
