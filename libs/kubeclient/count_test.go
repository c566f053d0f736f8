package kubeclient

import (
	"net/http"
	"net/url"
	"testing"
)

func TestVerbOfTellsOneObjectFromACollection(t *testing.T) {
	for _, c := range []struct{ method, url, want string }{
		{"GET", "/apis/batch/v1/namespaces/agents/jobs/hello-1", "get"},
		{"GET", "/apis/batch/v1/namespaces/agents/jobs", "list"},
		{"GET", "/apis/batch/v1/namespaces/agents/jobs?watch=true&resourceVersion=5", "watch"},
		{"GET", "/api/v1/namespaces/agents/secrets/token", "get"},
		{"GET", "/apis/agents.proompteng.ai/v1alpha1/namespaces/agents/agentruns/r/status", "get"},
		{"GET", "/api/v1/nodes/n1", "get"},
		{"GET", "/api/v1/nodes", "list"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/agents/leases/agentplane-run-controller", "get"},
		{"POST", "/apis/batch/v1/namespaces/agents/jobs", "create"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/agents/leases/x", "update"},
		{"PATCH", "/apis/batch/v1/namespaces/agents/jobs/x", "patch"},
		{"DELETE", "/apis/batch/v1/namespaces/agents/jobs/x", "delete"},
	} {
		u, _ := url.Parse(c.url)
		if got := verbOf(&http.Request{Method: c.method, URL: u}); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.url, got, c.want)
		}
	}
}

func TestRouteKeepsSpanNamesFew(t *testing.T) {
	for in, want := range map[string]string{
		"/apis/agents.proompteng.ai/v1alpha1/namespaces/agents/agentruns/hello/status": "/apis/agents.proompteng.ai/v1alpha1/namespaces/{namespace}/agentruns/{name}/status",
		"/apis/agents.proompteng.ai/v1alpha1/namespaces/agents/agentruns":              "/apis/agents.proompteng.ai/v1alpha1/namespaces/{namespace}/agentruns",
		"/api/v1/namespaces/agents/events":                                             "/api/v1/namespaces/{namespace}/events",
		"/api/v1/namespaces/agents/events/run.1789":                                    "/api/v1/namespaces/{namespace}/events/{name}",
		"/api/v1/namespaces/agents":                                                    "/api/v1/namespaces/{namespace}",
		"/apis/batch/v1/jobs":                                                          "/apis/batch/v1/jobs",
		"/apis/authentication.k8s.io/v1/tokenreviews":                                  "/apis/authentication.k8s.io/v1/tokenreviews",
		"/api/v1/nodes/kwok-node-0":                                                    "/api/v1/nodes/{name}",
		"/version":                                                                     "/version",
		"/apis":                                                                        "/apis",
	} {
		if got := Route(in); got != want {
			t.Errorf("Route(%s) = %s, want %s", in, got, want)
		}
	}
}
