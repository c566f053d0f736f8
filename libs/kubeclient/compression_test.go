package kubeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/config"
)

// A service's requests ask for no compressed responses (the API server would gzip every watch
// event and list for it); a client built from RESTConfig alone keeps asking. The server speaks
// TLS, as an API server does: client-go's transport without TLS is Go's default one, which
// ignores the setting.
func TestServicesAskTheAPIServerForNoCompression(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]string{} // request path -> its Accept-Encoding
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"JobList","apiVersion":"batch/v1","metadata":{},"items":[]}`))
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: `+srv.URL+`, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	list := func(cfg *rest.Config, ns string) string {
		t.Helper()
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kc.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return asked["/apis/batch/v1/namespaces/"+ns+"/jobs"]
	}
	svc, err := ForService(config.Service{Name: "run-controller", Kubeconfig: kubeconfig, KubeQPS: 100, KubeBurst: 200})
	if err != nil {
		t.Fatal(err)
	}
	if got := list(svc, "service"); got == "gzip" {
		t.Errorf("a service's request asked for gzip (Accept-Encoding %q)", got)
	}
	plain, err := RESTConfig(kubeconfig, "not-a-service")
	if err != nil {
		t.Fatal(err)
	}
	if got := list(plain, "cli"); got != "gzip" {
		t.Errorf("a client from RESTConfig asked with Accept-Encoding %q, want gzip (the test would not see a service asking)", got)
	}
}
