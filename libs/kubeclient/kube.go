// Package kubeclient builds Kubernetes clients the same way in every service: from KUBECONFIG or the
// in-cluster service account, with client-go requests traced by OpenTelemetry, and a scheme that
// knows the agentplane kinds.
package kubeclient

import (
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/config"
)

// Scheme knows the built-in kinds and the agentplane kinds.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(agentsv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(orchestrationv1alpha1.AddToScheme(Scheme))
}

// ForService is RESTConfig with the service's kubeconfig, name and client rate limits, and
// without response compression: a service runs next to the API server, whose CPU gzip would
// spend on every watch event and list it sends the service, to save bandwidth a local network
// does not need (kube-controller-manager and kube-scheduler turn it off alike).
func ForService(c config.Service) (*rest.Config, error) {
	cfg, err := RESTConfig(c.Kubeconfig, "agentplane-"+c.Name)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(c.KubeQPS), c.KubeBurst
	cfg.DisableCompression = true
	return cfg, nil
}

// RESTConfig loads the kubeconfig at path (the in-cluster config when empty), names the caller in
// the User-Agent, and traces every request.
func RESTConfig(path, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no KUBECONFIG set and not running in a cluster: %w", err)
		}
	}
	cfg.UserAgent = userAgent
	Instrument(cfg)
	return cfg, nil
}

// Instrument wraps the config's transport with an OpenTelemetry client span per request.
func Instrument(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return "k8s " + r.Method + " " + Route(r.URL.Path)
		}))
	})
}

// Route is an API server request path with the namespace and the object's name replaced by
// placeholders, so span names stay few (the full path is still the span's url.path):
// /apis/agents.proompteng.ai/v1alpha1/namespaces/agents/agentruns/hello/status becomes
// /apis/agents.proompteng.ai/v1alpha1/namespaces/{namespace}/agentruns/{name}/status.
func Route(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string // what follows the group and version
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		rest = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		rest = seg[3:]
	default:
		return path
	}
	if len(rest) >= 2 && rest[0] == "namespaces" {
		rest[1] = "{namespace}"
		rest = rest[2:]
	}
	// rest is now [resource [name [subresource...]]]; a namespace's own path is namespaces/{name}.
	if len(rest) >= 2 {
		rest[1] = "{name}"
	}
	return "/" + strings.Join(seg, "/")
}

// Clients are the typed and dynamic clients a service talks to the API server with.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Config is what both were built from (for typed REST clients of the agentplane groups).
	Config *rest.Config
}

// NewClients builds both clients from the service's configuration (ForService).
func NewClients(c config.Service) (Clients, error) {
	cfg, err := ForService(c)
	if err != nil {
		return Clients{}, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("dynamic client: %w", err)
	}
	return Clients{Kube: kc, Dynamic: dyn, Config: cfg}, nil
}
