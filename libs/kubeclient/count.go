package kubeclient

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// CountRequests counts every request made with cfg in c, by verb: get (one object), list,
// watch, create, update, patch, delete. It tells reads that poll (get) from the informers' list
// and watch, and the writes a controller makes.
func CountRequests(cfg *rest.Config, c *prometheus.CounterVec) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.WithLabelValues(verbOf(r)).Inc()
			return rt.RoundTrip(r)
		})
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// verbOf names a request the way the API server's audit log does.
func verbOf(r *http.Request) string {
	switch r.Method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		return "watch"
	}
	// .../namespaces/<ns>/<resource>[/<name>[/<subresource>]]: a name means one object.
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+1 < len(parts) {
			if len(parts)-(i+2) >= 2 {
				return "get"
			}
			return "list"
		}
	}
	if len(parts) >= 4 && (parts[0] == "apis" && len(parts) >= 5 || parts[0] == "api" && len(parts) >= 4) {
		return "get"
	}
	return "list"
}
