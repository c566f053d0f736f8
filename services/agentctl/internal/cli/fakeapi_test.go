package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// fakeAPI is a stand-in kube-apiserver for the pure unit tests of the run verbs' output and exit
// codes: it serves fixed objects (get, list with label and field selectors, create, patch, pod
// logs, discovery) over HTTPS, or fails every request with one status. The real API server's
// behaviour is tested end to end (e2e: agentctlRunVerbs on make up).
type fakeAPI struct {
	mu      sync.Mutex
	objs    map[string][]map[string]any // by resource (agentruns, jobs, ...), each with apiVersion and kind
	logs    map[string]string           // pod name: its log
	fail    int                         // when set, every request gets this HTTP status
	auth    []string                    // the Authorization header of each request
	created []map[string]any
	patches []string // METHOD path?dryRun of each patch
	// watches are the events a watch of a resource gets, after which the fake ends it.
	watches map[string][]watchEvent
	srv     *httptest.Server
}

func newFakeAPI(t *testing.T, objs ...runtime.Object) *fakeAPI {
	t.Helper()
	f := &fakeAPI{objs: map[string][]map[string]any{}, logs: map[string]string{}}
	for _, o := range objs {
		f.add(t, o)
	}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve)) // client-go sends credentials over TLS only
	t.Cleanup(f.srv.Close)
	return f
}

// resources maps a kind to its resource, for the objects fakeAPI holds.
var resources = map[string]string{
	"AgentRun": "agentruns", "OrchestrationRun": "orchestrationruns", "Orchestration": "orchestrations", "Agent": "agents",
	"Job": "jobs", "Event": "events", "Pod": "pods",
}

func (f *fakeAPI) add(t *testing.T, o runtime.Object) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	kind, _ := u["kind"].(string)
	res, ok := resources[kind]
	if !ok {
		t.Fatalf("fakeAPI holds no %q (set TypeMeta)", kind)
	}
	f.objs[res] = append(f.objs[res], u)
}

// kubeconfig writes a kubeconfig for the fake, in namespace ns, and returns its path.
func (f *fakeAPI) kubeconfig(t *testing.T, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: me, user: {token: kubeconfig-token}}]
contexts: [{name: fake, context: {cluster: fake, user: me, namespace: %s}}]
current-context: fake
`, f.srv.URL, ns)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	if f.fail != 0 {
		writeStatus(w, f.fail, "the fake API server fails every request")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/version":
		writeJSON(w, http.StatusOK, map[string]any{"major": "1", "minor": "37", "gitVersion": "v1.37.2"})
		return
	case len(parts) == 3 && parts[0] == "apis": // discovery of a group version
		var list []map[string]any
		for _, res := range []string{"agentruns", "agents", "orchestrationruns", "orchestrations"} {
			list = append(list, map[string]any{"name": res, "namespaced": true, "kind": res, "verbs": []string{"get", "list"}})
		}
		writeJSON(w, http.StatusOK, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": parts[1] + "/" + parts[2], "resources": list})
		return
	}
	// /api/v1/namespaces/NS/RES[/NAME[/log]], /apis/G/V/namespaces/NS/RES[/NAME], /apis/G/V/RES
	rest := parts[2:]
	if parts[0] == "apis" {
		rest = parts[3:]
	}
	ns := ""
	if len(rest) >= 2 && rest[0] == "namespaces" {
		ns, rest = rest[1], rest[2:]
	}
	if len(rest) == 0 {
		writeStatus(w, http.StatusNotFound, "no such path "+r.URL.Path)
		return
	}
	res, name, sub := rest[0], "", ""
	if len(rest) > 1 {
		name = rest[1]
	}
	if len(rest) > 2 {
		sub = rest[2]
	}
	switch {
	case r.Method == http.MethodGet && sub == "log":
		if _, ok := f.find(res, ns, name); !ok {
			writeStatus(w, http.StatusNotFound, fmt.Sprintf("pods %q not found", name))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, f.logs[name])
	case r.Method == http.MethodGet && name == "":
		f.list(w, r, res, ns)
	case r.Method == http.MethodGet, r.Method == http.MethodPatch:
		if r.Method == http.MethodPatch {
			f.patches = append(f.patches, r.URL.Path+"?dryRun="+r.URL.Query().Get("dryRun"))
		}
		o, ok := f.find(res, ns, name)
		if !ok {
			writeStatus(w, http.StatusNotFound, fmt.Sprintf("%s %q not found", res, name))
			return
		}
		writeJSON(w, http.StatusOK, o)
	case r.Method == http.MethodPost:
		var o map[string]any
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			writeStatus(w, http.StatusBadRequest, err.Error())
			return
		}
		meta, _ := o["metadata"].(map[string]any)
		if meta["name"] == nil || meta["name"] == "" {
			meta["name"] = fmt.Sprint(meta["generateName"]) + "x7k2p"
		}
		meta["namespace"], meta["uid"], meta["creationTimestamp"] = ns, "uid-new", "2026-12-02T10:00:00Z"
		if r.URL.Query().Get("dryRun") == "" {
			f.created = append(f.created, o)
			f.objs[res] = append(f.objs[res], o)
		}
		writeJSON(w, http.StatusCreated, o)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path)
	}
}

func (f *fakeAPI) find(res, ns, name string) (map[string]any, bool) {
	for _, o := range f.objs[res] {
		u := unstructured.Unstructured{Object: o}
		if u.GetName() == name && u.GetNamespace() == ns {
			return o, true
		}
	}
	return nil, false
}

// watchEvent is one event of a watch, as the API server streams it.
type watchEvent struct {
	Type   string         `json:"type"`
	Object map[string]any `json:"object"`
}

func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request, res, ns string) {
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		for _, ev := range f.watches[res] {
			_ = enc.Encode(ev)
		}
		return
	}
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, err.Error())
		return
	}
	fsel, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, err.Error())
		return
	}
	items := []map[string]any{}
	for _, o := range f.objs[res] {
		u := unstructured.Unstructured{Object: o}
		uid, _, _ := unstructured.NestedString(o, "involvedObject", "uid")
		if (ns == "" || u.GetNamespace() == ns) && sel.Matches(labels.Set(u.GetLabels())) &&
			fsel.Matches(fields.Set{"metadata.name": u.GetName(), "involvedObject.uid": uid}) {
			items = append(items, o)
		}
	}
	apiVersion, kind := "v1", ""
	for k, r := range resources {
		if r == res {
			kind = k
		}
	}
	switch res {
	case "agentruns", "agents":
		apiVersion = agentsv1alpha1.GroupVersion.String()
	case "orchestrationruns", "orchestrations":
		apiVersion = orchv1alpha1.GroupVersion.String()
	case "jobs":
		apiVersion = "batch/v1"
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": apiVersion, "kind": kind + "List", "metadata": map[string]any{"resourceVersion": "100"}, "items": items})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeStatus answers as kube-apiserver does when it refuses: a Status with the code's reason.
func writeStatus(w http.ResponseWriter, code int, msg string) {
	reason := map[int]metav1.StatusReason{
		http.StatusUnauthorized: metav1.StatusReasonUnauthorized, http.StatusForbidden: metav1.StatusReasonForbidden,
		http.StatusNotFound: metav1.StatusReasonNotFound, http.StatusBadRequest: metav1.StatusReasonBadRequest,
		http.StatusInternalServerError: metav1.StatusReasonInternalError, http.StatusMethodNotAllowed: metav1.StatusReasonMethodNotAllowed,
	}[code]
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}) //nolint:gosec // G115: an HTTP status
}

// sawToken reports whether a request carried the bearer token.
func (f *fakeAPI) sawToken(token string) (saw bool, all []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.auth {
		if a == "Bearer "+token {
			saw = true
		}
	}
	return saw, append([]string(nil), f.auth...)
}

// podOf is a finished pod of a run's Job, as kwok or a kubelet leaves it.
func podOf(name string, lbls map[string]string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "agents", Labels: lbls, CreationTimestamp: metav1.NewTime(t0)},
		Status:     corev1.PodStatus{Phase: corev1.PodSucceeded}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}})
	}
	return p
}
