package kube

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
