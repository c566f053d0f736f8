package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/health"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
)

// The aggregated API: the Kubernetes API server serves it under /apis/APIGroup/APIVersion (an
// APIService names the gateway's Service), authenticates the caller with whatever the caller's
// kubeconfig uses, and passes the identity on over its front-proxy trust.
const (
	APIGroup   = "gateway.agents.proompteng.ai"
	APIVersion = "v1alpha1"
	// The resources, all namespaced: the control plane's status (get, and ?watch=true for the
	// stream), its recorded transitions, the runs stream of the runs namespace, and its archived
	// runs (ResourceArchivedRuns: list, and get by uid).
	ResourceStatus  = "controlplanestatus"
	ResourceHistory = "controlplanestatushistory"
	ResourceRuns    = "runs"
)

// UserSource names the user of a request the API server proxied (access.FrontProxy).
type UserSource interface {
	User(r *http.Request) (authnv1.UserInfo, error)
}

// Aggregated serves the gateway's reads to users the API server authenticated. Each request is
// authorized again here, with the same SubjectAccessReviews as the gateway's own streams (the
// API server has authorized only the aggregated resource): Status for the status and its
// history, Runs (nil: not served) for the runs stream.
type Aggregated struct {
	Gateway       *Gateway
	Users         UserSource
	Status        Authorizer
	Runs          Authorizer
	RunsNamespace string
}

type userKey struct{}

// Handler serves discovery and the resources.
func (a *Aggregated) Handler() http.Handler {
	history := a.Gateway.historyFor(func() Authorizer { return a.Status })
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := &statusWriter{ResponseWriter: rw}
		defer w.finish()
		u, err := a.Users.User(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentplane"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "the gateway's API is read-only: it answers GET", http.StatusMethodNotAllowed)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		base := "/apis/" + APIGroup + "/" + APIVersion
		switch p := strings.TrimSuffix(r.URL.Path, "/"); {
		case p == "/apis": // legacy discovery: the API server then reads the version's resources
			writeJSON(w, groupList())
		case p == "/apis/"+APIGroup:
			writeJSON(w, group())
		case p == base:
			writeJSON(w, resources(a.Runs != nil, a.Gateway.archive != nil))
		case strings.HasPrefix(p, base+"/namespaces/"):
			parts := strings.Split(strings.TrimPrefix(p, base+"/namespaces/"), "/")
			if len(parts) == 3 && parts[1] == ResourceArchivedRuns {
				a.serveArchive(w, r, parts[0], parts[2])
				return
			}
			if len(parts) != 2 {
				http.Error(w, "no such resource: the gateway serves namespaces/NAMESPACE/{"+ResourceStatus+","+ResourceHistory+","+ResourceRuns+"}", http.StatusNotFound)
				return
			}
			a.serveResource(w, r, parts[0], parts[1], history)
		default:
			http.Error(w, "no such path: the gateway serves "+base, http.StatusNotFound)
		}
	})
}

// serveArchive lists the archived runs (uid "") or gets one, for the user the API server vouched
// for, with the rights a live run needs.
func (a *Aggregated) serveArchive(w http.ResponseWriter, r *http.Request, ns, uid string) {
	g := a.Gateway
	if g.archive == nil {
		http.Error(w, noArchive, http.StatusNotFound)
		return
	}
	if ns != g.archive.namespace {
		http.Error(w, "this gateway serves the archived runs of namespace "+g.archive.namespace+", not "+ns, http.StatusNotFound)
		return
	}
	if r.URL.Query().Get("watch") != "" {
		http.Error(w, "archived runs do not change: list them (no ?watch)", http.StatusBadRequest)
		return
	}
	if uid == "" {
		g.serveArchiveList(w, r, ns)
		return
	}
	g.serveArchivedRun(w, r, &jangarv1.GetArchivedRunRequest{Namespace: ns, Uid: uid})
}

func (a *Aggregated) serveResource(w http.ResponseWriter, r *http.Request, ns, resource string, history http.Handler) {
	g := a.Gateway
	q := r.URL.Query()
	watch := q.Get("watch") == "true" || q.Get("watch") == "1"
	switch resource {
	case ResourceStatus, ResourceHistory:
		if ns != g.namespace {
			http.Error(w, "this gateway serves the control plane of namespace "+g.namespace+", not "+ns, http.StatusNotFound)
			return
		}
		if resource == ResourceHistory {
			history.ServeHTTP(w, r)
			return
		}
		if watch {
			g.serveFeed(w, asStream(r), feed{hub: g.hub, auth: a.Status})
			return
		}
		if _, err := g.authorizeHTTPVerb(r.Context(), w, a.Status, g.credential(r), access.VerbGet); err != nil {
			return
		}
		waitReady(r.Context(), g.hub)
		cur := g.hub.Current()
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, health.Event{Type: health.Snapshot, GeneratedAt: cur.GeneratedAt, Items: cur.Items})
	case ResourceArchivedRuns:
		a.serveArchive(w, r, ns, "")
	case ResourceRuns:
		if a.Runs == nil || g.runs.hub == nil {
			http.Error(w, "this gateway serves no runs stream (its console is off)", http.StatusNotFound)
			return
		}
		if ns != a.RunsNamespace {
			http.Error(w, "this gateway serves the runs of namespace "+a.RunsNamespace+", not "+ns, http.StatusNotFound)
			return
		}
		if !watch {
			http.Error(w, "runs is a stream: add ?watch=true", http.StatusBadRequest)
			return
		}
		g.serveFeed(w, asStream(r), feed{hub: g.runs.hub, auth: a.Runs})
	default:
		http.Error(w, "no resource "+resource+": the gateway serves "+ResourceStatus+", "+ResourceHistory+", "+ResourceRuns+" and "+ResourceArchivedRuns, http.StatusNotFound)
	}
}

// asStream turns a watch request into the stream endpoint's parameters: newline-delimited JSON
// events, resuming after resourceVersion (a cursor of an earlier event), with the heartbeat asked.
func asStream(r *http.Request) *http.Request {
	q := r.URL.Query()
	out := r.Clone(r.Context())
	out.Header.Del("Last-Event-ID")
	sq := out.URL.Query()
	sq.Set("format", "ndjson")
	if rv := q.Get("resourceVersion"); rv != "" {
		sq.Set("since", rv)
	}
	sq.Del("resourceVersion")
	sq.Del("watch")
	out.URL.RawQuery = sq.Encode()
	// The per-address bound counts the address the API server saw the user at (the last
	// X-Forwarded-For entry, which the API server appends), never the API server's own: every
	// aggregated stream comes from it.
	out.RemoteAddr = ""
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		entries := strings.Split(xff[len(xff)-1], ",")
		out.RemoteAddr = strings.TrimSpace(entries[len(entries)-1])
	}
	return out
}

func groupList() metav1.APIGroupList {
	return metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{group()}}
}

func group() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: APIGroup + "/" + APIVersion, Version: APIVersion}
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: APIGroup,
		Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func resources(runs, archived bool) metav1.APIResourceList {
	l := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: APIGroup + "/" + APIVersion,
		APIResources: []metav1.APIResource{
			{Name: ResourceStatus, SingularName: ResourceStatus, Namespaced: true, Kind: "ControlPlaneStatus", Verbs: metav1.Verbs{"get", "list", "watch"}},
			{Name: ResourceHistory, SingularName: ResourceHistory, Namespaced: true, Kind: "ControlPlaneStatusHistory", Verbs: metav1.Verbs{"get", "list"}},
		}}
	if archived {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: ResourceArchivedRuns, SingularName: "archivedrun", Namespaced: true, Kind: "ArchivedRun", Verbs: metav1.Verbs{"get", "list"}})
	}
	if runs {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: ResourceRuns, SingularName: "run", Namespaced: true, Kind: "RunEvent", Verbs: metav1.Verbs{"watch"}})
	}
	return l
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// statusWriter turns the gateway's plain-text errors into a metav1.Status, which kubectl and
// client-go show as the message it holds.
type statusWriter struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (s *statusWriter) WriteHeader(code int) {
	if code >= 400 && s.code == 0 {
		s.code = code
		return
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code != 0 {
		return s.body.Write(b)
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok && s.code == 0 {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

var reasons = map[int]metav1.StatusReason{
	http.StatusBadRequest: metav1.StatusReasonBadRequest, http.StatusUnauthorized: metav1.StatusReasonUnauthorized,
	http.StatusForbidden: metav1.StatusReasonForbidden, http.StatusNotFound: metav1.StatusReasonNotFound,
	http.StatusMethodNotAllowed: metav1.StatusReasonMethodNotAllowed, http.StatusNotAcceptable: metav1.StatusReasonNotAcceptable,
	http.StatusTooManyRequests: metav1.StatusReasonTooManyRequests, http.StatusServiceUnavailable: metav1.StatusReasonServiceUnavailable,
}

func (s *statusWriter) finish() {
	if s.code == 0 {
		return
	}
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: strings.TrimSpace(s.body.String()), Reason: reasons[s.code], Code: int32(s.code)} //nolint:gosec // G115: an HTTP status code
	if st.Reason == "" {
		st.Reason = metav1.StatusReasonInternalError
	}
	h := s.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	s.ResponseWriter.WriteHeader(s.code)
	_ = json.NewEncoder(s.ResponseWriter).Encode(st)
}
