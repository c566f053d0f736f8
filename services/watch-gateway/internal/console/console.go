// Package console is watch-gateway's web console: a page at / (plain HTML, CSS and JavaScript,
// embedded with go:embed, no build step) that shows the control-plane health from the status
// stream, the namespace's runs from the runs stream, a run's conditions, events, Jobs and steps,
// and the status history; and a small JSON API under /console/api/ for what the streams do not
// carry: the session, a run's details, and cancelling a run.
//
// Access follows the streams' (JANGAR_WATCH_AUTH_MODE):
//   - token: a sign-in form exchanges a bearer token (TokenReview, then a SubjectAccessReview for
//     watching controlplane/status, as the stream asks) for a session cookie the gateway signs
//     (package session): HttpOnly, Secure, SameSite=Strict. A run's details need get, and Cancel
//     needs patch, on the run's resource, each asked of the API server for the signed-in user
//     (SubjectAccessReview); the gateway then patches spec.cancel with its own ServiceAccount.
//   - mtls: the client certificate's subject is the user (common name, organizations as groups);
//     reading is open to any certificate the CA signed, as the streams are; Cancel asks patch.
//   - none: no checks (the gateway listens on loopback only); Cancel is open too.
//
// Every change (Cancel, sign-out) must carry the session's CSRF token in X-CSRF-Token, and a
// request whose Origin or Sec-Fetch-Site says it came from another site is refused. Responses
// carry a Content-Security-Policy that allows scripts, styles and connections to this origin
// only (no inline script or style) and forbids framing.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/redact"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/gateway"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/runs"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/session"
)

//go:embed assets
var assets embed.FS

// CSP is the console's Content-Security-Policy.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// CSRFHeader carries the session's CSRF token on every change.
const CSRFHeader = "X-CSRF-Token"

// Authenticator reviews tokens and decides for users (access.Reviewer).
type Authenticator interface {
	gateway.Authorizer
	Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error)
}

// Console serves the page and its API.
type Console struct {
	// Mode is the gateway's access mode.
	Mode access.Mode
	// Namespace is the gateway's namespace.
	Namespace string
	// Sessions signs the session cookie.
	Sessions *session.Keys
	// Status decides who may sign in (watch controlplane/status); token mode only.
	Status Authenticator
	// Kinds decide, per run kind, who may get and patch runs (token and mtls modes).
	Kinds map[string]gateway.Authorizer
	// Reads decide who may see what a run's page shows besides the run, read with the gateway's
	// own rights: ReadEvents (list events), ReadJobs (list jobs.batch), ReadOrchestrations (get
	// orchestrations). Token mode asks them for the user; a missing one hides that part.
	Reads map[string]gateway.Authorizer
	// Runs is the runs stream's cache.
	Runs *runs.Source
	// Kube reads events and Jobs; Client (the generated clientset of the agentplane groups) reads
	// Orchestrations and patches runs: the gateway's own ServiceAccount.
	Kube        kubernetes.Interface
	Client      versioned.Interface
	HasHistory  bool
	HistoryKeep time.Duration
	// HasArchive: the gateway reads the run archive (gateway.ArchivePath), which History lists.
	HasArchive bool
	// CancelDisabled hides Cancel and refuses it (JANGAR_CONSOLE_CANCEL_ENABLED=false).
	CancelDisabled bool
	// OnCancel, when set, is told of each cancel the console made (metrics).
	OnCancel func(kind, outcome string)
}

// The parts of a run's page read with the gateway's rights, each shown only to a user who may
// read it (Console.Reads).
const (
	ReadEvents         = "events"
	ReadJobs           = "jobs"
	ReadOrchestrations = "orchestrations"
)

// mayRead checks that u may read part (list events, list jobs, get orchestrations) in the
// namespace: token mode asks the API server for the user; none and mtls modes, like the run
// itself, show it.
func (c *Console) mayRead(ctx context.Context, u *authnv1.UserInfo, part string) error {
	if c.Mode != access.Token {
		return nil
	}
	az := c.Reads[part]
	if az == nil || u == nil {
		return &access.Error{Kind: access.Forbidden, Msg: "no access check is configured for " + part}
	}
	verb := "list"
	if part == ReadOrchestrations {
		verb = "get"
	}
	return az.CheckUser(ctx, *u, verb)
}

// hidden notes on the page that a part is not shown, and why.
func hidden(d *Detail, part string, err error) {
	if access.KindOf(err) == access.Forbidden {
		d.Problems = append(d.Problems, "not shown: you may not "+map[string]string{ReadEvents: "list events", ReadJobs: "list jobs",
			ReadOrchestrations: "get orchestrations"}[part]+" in this namespace")
		return
	}
	d.Problems = append(d.Problems, "not shown: "+part+" could not be checked for you now; retry shortly")
}

// Handler routes / and /console/.
func (c *Console) Handler() http.Handler {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/"
		files.ServeHTTP(w, r2)
	})
	mux.Handle("GET /console/", http.StripPrefix("/console", files))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/favicon.svg"
		w.Header().Set("Content-Type", "image/svg+xml")
		files.ServeHTTP(w, r2)
	})
	mux.HandleFunc("GET /console/api/session", c.getSession)
	mux.HandleFunc("POST /console/api/session", c.signIn)
	mux.HandleFunc("DELETE /console/api/session", c.signOut)
	mux.HandleFunc("GET /console/api/runs/{kind}/{name}", c.runDetail)
	mux.HandleFunc("POST /console/api/runs/{kind}/{name}/cancel", c.cancel)
	return secure(mux)
}

// secure adds the security headers every console response carries.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// apiError is every error's JSON.
type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "2")
	}
	writeJSON(w, code, apiError{Error: msg})
}

// failAccess answers an access refusal with its status code.
func failAccess(w http.ResponseWriter, err error) {
	switch access.KindOf(err) {
	case access.Unauthenticated:
		fail(w, http.StatusUnauthorized, err.Error())
	case access.Forbidden:
		fail(w, http.StatusForbidden, err.Error())
	default:
		fail(w, http.StatusServiceUnavailable, err.Error())
	}
}

// sameOrigin refuses a request another site made: its Origin (when sent) must be this host, and
// its Sec-Fetch-Site (when sent) same-origin.
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("refused: the request came from another site (Sec-Fetch-Site: %s)", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errors.New("refused: the request came from another origin")
		}
	}
	return nil
}

// user is who r is: in token mode the session's user (or a bearer token's), in mtls mode the
// client certificate's subject, in none mode nobody (and nobody is checked).
func (c *Console) user(ctx context.Context, r *http.Request) (*authnv1.UserInfo, error) {
	switch c.Mode {
	case access.Token:
		if token, ok := access.BearerToken(r.Header.Get("Authorization")); ok && c.Status != nil {
			u, err := c.Status.Authenticate(ctx, token)
			if err != nil {
				return nil, err
			}
			return &u, nil
		}
		s, ok := c.Sessions.FromRequest(r)
		if !ok || s.Anonymous() {
			return nil, &access.Error{Kind: access.Unauthenticated, Msg: "sign in first"}
		}
		// Who the session's token belongs to now (reviewed again, cached for at most 30 s): a
		// revoked token or a deleted ServiceAccount ends the session; groups are today's.
		token, err := c.Sessions.Token(s)
		if err != nil || c.Status == nil {
			return nil, &access.Error{Kind: access.Unauthenticated, Msg: "the session holds no token this gateway can open: sign in again"}
		}
		u, err := c.Status.Authenticate(ctx, token)
		if err != nil {
			if access.KindOf(err) == access.Unauthenticated {
				return nil, &access.Error{Kind: access.Unauthenticated, Msg: "the token this session was signed in with is no longer valid (revoked, or its ServiceAccount deleted): sign in again"}
			}
			return nil, err
		}
		return &u, nil
	case access.MTLS:
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return nil, &access.Error{Kind: access.Unauthenticated, Msg: "a client certificate is required"}
		}
		sub := r.TLS.PeerCertificates[0].Subject
		return &authnv1.UserInfo{Username: sub.CommonName, Groups: sub.Organization}, nil
	}
	return nil, nil
}

// may checks that u may do verb on runs of kind (none mode: anyone may; reading in mtls mode,
// like the streams: any certificate).
func (c *Console) may(ctx context.Context, u *authnv1.UserInfo, kind, verb string) error {
	if c.Mode == access.None || (c.Mode == access.MTLS && verb != "patch") {
		return nil
	}
	az := c.Kinds[kind]
	if az == nil || u == nil {
		return &access.Error{Kind: access.Forbidden, Msg: "no access check is configured for " + kind}
	}
	return az.CheckUser(ctx, *u, verb)
}

// sessionReply is GET /console/api/session.
type sessionReply struct {
	Mode      string `json:"mode"`
	Namespace string `json:"namespace"`
	SignedIn  bool   `json:"signed_in"`
	User      string `json:"user,omitempty"`
	CSRF      string `json:"csrf,omitempty"`
	History   bool   `json:"history"`
	Archive   bool   `json:"archive"`
	Retention string `json:"retention,omitempty"`
}

func (c *Console) reply(s session.Session, signedIn bool) sessionReply {
	out := sessionReply{Mode: string(c.Mode), Namespace: c.Namespace, SignedIn: signedIn, History: c.HasHistory, Archive: c.HasArchive}
	if c.HasHistory {
		out.Retention = c.HistoryKeep.String()
	}
	if signedIn {
		out.User, out.CSRF = s.User, c.Sessions.CSRF(s)
	}
	return out
}

// getSession tells the page who it is signed in as and its CSRF token. Without authentication
// (none, mtls) every visitor gets an anonymous session, which binds the CSRF token.
func (c *Console) getSession(w http.ResponseWriter, r *http.Request) {
	s, ok := c.Sessions.FromRequest(r)
	if c.Mode == access.Token {
		if !ok || s.Anonymous() {
			writeJSON(w, http.StatusOK, c.reply(session.Session{}, false))
			return
		}
		// A session whose token no longer holds is signed out here, so the page asks to sign in.
		if _, err := c.user(r.Context(), r); access.KindOf(err) == access.Unauthenticated {
			http.SetCookie(w, c.Sessions.Clear())
			writeJSON(w, http.StatusOK, c.reply(session.Session{}, false))
			return
		}
		writeJSON(w, http.StatusOK, c.reply(s, true))
		return
	}
	if !ok {
		s, _ = c.Sessions.Start(nil, "", time.Time{})
		ck, err := c.Sessions.Cookie(s)
		if err != nil {
			fail(w, http.StatusInternalServerError, err.Error())
			return
		}
		http.SetCookie(w, ck)
	}
	out := c.reply(s, true)
	if u, err := c.user(r.Context(), r); err == nil && u != nil {
		out.User = u.Username
	}
	writeJSON(w, http.StatusOK, out)
}

// maxSignInBody bounds a sign-in request (a token is a few KiB at most).
const maxSignInBody = 64 << 10

// signIn exchanges a bearer token (JSON {"token": ...}, or a form field token) for a session.
// A form post (no script) is answered with a redirect to the page; the token is never echoed,
// logged or put in a URL.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	form := strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded")
	done := func(code int, msg string) {
		if form {
			target := "/"
			if code != http.StatusOK {
				target = "/?signin=refused"
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		fail(w, code, msg)
	}
	if err := sameOrigin(r); err != nil {
		done(http.StatusForbidden, err.Error())
		return
	}
	if c.Mode != access.Token {
		done(http.StatusBadRequest, "this gateway does not use sign-in (access mode "+string(c.Mode)+")")
		return
	}
	var token string
	r.Body = http.MaxBytesReader(w, r.Body, maxSignInBody)
	if form {
		if err := r.ParseForm(); err != nil {
			done(http.StatusBadRequest, "the sign-in form could not be read")
			return
		}
		token = r.PostForm.Get("token")
	} else {
		var in struct {
			Token string `json:"token"`
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil || json.Unmarshal(raw, &in) != nil {
			done(http.StatusBadRequest, `send {"token": "<a Kubernetes bearer token>"}`)
			return
		}
		token = in.Token
	}
	token = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(token), "Bearer "))
	if token == "" {
		done(http.StatusUnauthorized, "paste a Kubernetes bearer token (kubectl create token <serviceaccount>)")
		return
	}
	if c.Status == nil {
		done(http.StatusInternalServerError, "sign-in is not configured")
		return
	}
	u, err := c.Status.Authenticate(r.Context(), token)
	if err == nil {
		err = c.Status.CheckUser(r.Context(), u, access.VerbWatch)
	}
	if err != nil {
		slog.Default().Info("console sign-in refused", "user", u.Username, "reason", redact.String(err.Error()))
		if form {
			done(http.StatusUnauthorized, "")
			return
		}
		failAccess(w, err)
		return
	}
	// The session ends no later than the token it was made from.
	s, err := c.Sessions.Start(&u, token, access.TokenExpiry(token))
	var ck *http.Cookie
	if err == nil {
		ck, err = c.Sessions.Cookie(s)
	}
	if err != nil {
		done(http.StatusBadRequest, err.Error())
		return
	}
	http.SetCookie(w, ck)
	slog.Default().Info("console sign-in", "user", u.Username)
	if form {
		done(http.StatusOK, "")
		return
	}
	writeJSON(w, http.StatusOK, c.reply(s, true))
}

// checkChange refuses (and answers) a change request from another site or without the session's
// CSRF token; it reports whether the request may go on.
func (c *Console) checkChange(w http.ResponseWriter, r *http.Request) bool {
	if err := sameOrigin(r); err != nil {
		fail(w, http.StatusForbidden, err.Error())
		return false
	}
	s, ok := c.Sessions.FromRequest(r)
	if !ok {
		fail(w, http.StatusForbidden, "refused: no session (reload the page)")
		return false
	}
	if !c.Sessions.CheckCSRF(s, r.Header.Get(CSRFHeader)) {
		fail(w, http.StatusForbidden, "refused: the request does not carry this session's CSRF token")
		return false
	}
	return true
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	if !c.checkChange(w, r) {
		return
	}
	http.SetCookie(w, c.Sessions.Clear())
	writeJSON(w, http.StatusOK, c.reply(session.Session{}, false))
}

// Condition, Event, Job and Step are a run's details as the page shows them.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	LastTransitionTime string `json:"last_transition_time,omitempty"`
}

type Event struct {
	Type     string `json:"type"`
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	Count    int32  `json:"count"`
	Last     string `json:"last"`
	Reporter string `json:"reporter,omitempty"`
}

type Job struct {
	Name       string      `json:"name"`
	Active     int32       `json:"active"`
	Succeeded  int32       `json:"succeeded"`
	Failed     int32       `json:"failed"`
	Start      string      `json:"start,omitempty"`
	Completion string      `json:"completion,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	Deleting   bool        `json:"deleting,omitempty"`
}

type Step struct {
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
	Phase     string   `json:"phase"`
	Run       string   `json:"run,omitempty"`
}

// Detail is GET /console/api/runs/{kind}/{name}.
type Detail struct {
	Kind       string      `json:"kind"`
	Name       string      `json:"name"`
	Namespace  string      `json:"namespace"`
	Item       any         `json:"item"`
	Conditions []Condition `json:"conditions"`
	Events     []Event     `json:"events"`
	Jobs       []Job       `json:"jobs"`
	Steps      []Step      `json:"steps,omitempty"`
	CanCancel  bool        `json:"can_cancel"`
	Problems   []string    `json:"problems,omitempty"`
}

func conditions(in []metav1.Condition) []Condition {
	out := make([]Condition, 0, len(in))
	for _, c := range in {
		out = append(out, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: redact.String(c.Message),
			LastTransitionTime: c.LastTransitionTime.UTC().Format(time.RFC3339)})
	}
	return out
}

func (c *Console) runDetail(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	kind, ok := runs.KindOf(r.PathValue("kind"))
	if !ok {
		fail(w, http.StatusBadRequest, fmt.Sprintf("kind %q must be AgentRun or OrchestrationRun", r.PathValue("kind")))
		return
	}
	name := r.PathValue("name")
	u, err := c.user(ctx, r)
	if err == nil {
		err = c.may(ctx, u, kind, "get")
	}
	if err != nil {
		failAccess(w, err)
		return
	}
	d := Detail{Kind: kind, Name: name, Namespace: c.Namespace, Conditions: []Condition{}, Events: []Event{}, Jobs: []Job{}}
	switch kind {
	case runs.KindAgentRun:
		ar, ok := c.Runs.AgentRun(name)
		if !ok {
			fail(w, http.StatusNotFound, fmt.Sprintf("AgentRun %s/%s is not there (deleted, or not yet seen)", c.Namespace, name))
			return
		}
		d.Item = runs.AgentRunItem(ar)
		d.Conditions = conditions(ar.Status.Conditions)
		if err := c.mayRead(ctx, u, ReadJobs); err != nil {
			hidden(&d, ReadJobs, err)
		} else {
			d.Jobs = c.jobsOf(ctx, name, &d)
		}
	case runs.KindOrchestrationRun:
		or, ok := c.Runs.OrchestrationRun(name)
		if !ok {
			fail(w, http.StatusNotFound, fmt.Sprintf("OrchestrationRun %s/%s is not there (deleted, or not yet seen)", c.Namespace, name))
			return
		}
		d.Item = runs.OrchestrationRunItem(or)
		d.Conditions = conditions(or.Status.Conditions)
		d.Steps = c.stepsOf(ctx, or, &d, c.mayRead(ctx, u, ReadOrchestrations))
	}
	if err := c.mayRead(ctx, u, ReadEvents); err != nil {
		hidden(&d, ReadEvents, err)
	} else {
		d.Events = c.eventsOf(ctx, kind, name, &d)
	}
	d.CanCancel = !c.CancelDisabled && c.may(ctx, u, kind, "patch") == nil
	writeJSON(w, http.StatusOK, d)
}

// jobsOf lists the Jobs run-controller made for an AgentRun (by its label), newest last.
func (c *Console) jobsOf(ctx context.Context, run string, d *Detail) []Job {
	l, err := c.Kube.BatchV1().Jobs(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelAgentRun + "=" + run})
	if err != nil {
		d.Problems = append(d.Problems, "Jobs could not be listed: "+apiReason(err))
		return []Job{}
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
	out := make([]Job, 0, len(l.Items))
	for _, j := range l.Items {
		out = append(out, jobOf(&j))
	}
	return out
}

func jobOf(j *batchv1.Job) Job {
	out := Job{Name: j.Name, Active: j.Status.Active, Succeeded: j.Status.Succeeded, Failed: j.Status.Failed, Deleting: j.DeletionTimestamp != nil}
	if j.Status.StartTime != nil {
		out.Start = j.Status.StartTime.UTC().Format(time.RFC3339)
	}
	if j.Status.CompletionTime != nil {
		out.Completion = j.Status.CompletionTime.UTC().Format(time.RFC3339)
	}
	for _, jc := range j.Status.Conditions {
		out.Conditions = append(out.Conditions, Condition{Type: string(jc.Type), Status: string(jc.Status), Reason: jc.Reason,
			Message: redact.String(jc.Message), LastTransitionTime: jc.LastTransitionTime.UTC().Format(time.RFC3339)})
	}
	return out
}

// stepsOf is an OrchestrationRun's graph: the Orchestration's steps with their dependsOn, each
// with its phase from the run's stepStatuses (Pending when not started). A user who may not read
// the Orchestration (mayReadOrch) sees the run's steps without their dependencies.
func (c *Console) stepsOf(ctx context.Context, or *orchv1alpha1.OrchestrationRun, d *Detail, mayReadOrch error) []Step {
	phases := map[string]orchv1alpha1.StepStatus{}
	for _, st := range or.Status.StepStatuses {
		phases[st.Name] = st
	}
	o := &orchv1alpha1.Orchestration{}
	err := mayReadOrch
	if err != nil {
		hidden(d, ReadOrchestrations, err)
	} else {
		o, err = c.Client.OrchestrationV1alpha1().Orchestrations(c.Namespace).Get(ctx, or.Spec.OrchestrationRef.Name, metav1.GetOptions{})
		if err != nil {
			d.Problems = append(d.Problems, fmt.Sprintf("Orchestration %s could not be read: %s", or.Spec.OrchestrationRef.Name, apiReason(err)))
		}
	}
	if err != nil {
		out := make([]Step, 0, len(or.Status.StepStatuses))
		for _, st := range or.Status.StepStatuses {
			out = append(out, stepOf(st.Name, nil, st))
		}
		return out
	}
	out := make([]Step, 0, len(o.Spec.Steps))
	for _, s := range o.Spec.Steps {
		out = append(out, stepOf(s.Name, s.DependsOn, phases[s.Name]))
	}
	return out
}

func stepOf(name string, deps []string, st orchv1alpha1.StepStatus) Step {
	s := Step{Name: name, DependsOn: deps, Phase: st.Phase}
	if s.Phase == "" {
		s.Phase = agentsv1alpha1.PhasePending
	}
	if st.ResourceRef != nil {
		s.Run = st.ResourceRef.Name
	}
	return s
}

// eventsOf lists the Events about a run, newest first (at most 50).
func (c *Console) eventsOf(ctx context.Context, kind, name string, d *Detail) []Event {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", kind), fields.OneTermEqualSelector("involvedObject.name", name))
	l, err := c.Kube.CoreV1().Events(c.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		d.Problems = append(d.Problems, "Events could not be listed: "+apiReason(err))
		return []Event{}
	}
	out := make([]Event, 0, len(l.Items))
	for _, e := range l.Items {
		last := e.LastTimestamp.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		count := e.Count
		if e.Series != nil && e.Series.Count > count {
			count = e.Series.Count
		}
		reporter := e.ReportingController
		if reporter == "" {
			reporter = e.Source.Component
		}
		out = append(out, Event{Type: e.Type, Reason: e.Reason, Message: redact.String(e.Message), Count: max(count, 1),
			Last: last.UTC().Format(time.RFC3339), Reporter: reporter})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Last > out[j].Last })
	if len(out) > 50 {
		out = out[:50]
	}
	return out
}

// apiReason says why an API call failed without the server's own words.
func apiReason(err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return "the gateway's ServiceAccount may not (see its chart's RBAC)"
	case apierrors.IsNotFound(err):
		return "not found"
	}
	return "the API server did not answer (the gateway's log says why)"
}

// cancel sets spec.cancel on a run, for a user allowed to patch it.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	kind, ok := runs.KindOf(r.PathValue("kind"))
	if !ok {
		fail(w, http.StatusBadRequest, fmt.Sprintf("kind %q must be AgentRun or OrchestrationRun", r.PathValue("kind")))
		return
	}
	name := r.PathValue("name")
	if !c.checkChange(w, r) {
		c.count(kind, "refused")
		return
	}
	if c.CancelDisabled {
		c.count(kind, "refused")
		fail(w, http.StatusForbidden, "cancelling from the console is turned off (JANGAR_CONSOLE_CANCEL_ENABLED=false); use kubectl or agentctl cancel")
		return
	}
	u, err := c.user(ctx, r)
	if err == nil {
		err = c.may(ctx, u, kind, "patch")
	}
	if err != nil {
		c.count(kind, "refused")
		failAccess(w, err)
		return
	}
	who := "anonymous"
	if u != nil {
		who = u.Username
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"cancel": true}})
	opts := metav1.PatchOptions{FieldManager: "agentplane-console"}
	if kind == runs.KindOrchestrationRun {
		_, err = c.Client.OrchestrationV1alpha1().OrchestrationRuns(c.Namespace).Patch(ctx, name, types.MergePatchType, patch, opts)
	} else {
		_, err = c.Client.AgentsV1alpha1().AgentRuns(c.Namespace).Patch(ctx, name, types.MergePatchType, patch, opts)
	}
	switch {
	case apierrors.IsNotFound(err):
		c.count(kind, "not_found")
		fail(w, http.StatusNotFound, fmt.Sprintf("%s %s/%s does not exist", kind, c.Namespace, name))
		return
	case err != nil:
		c.count(kind, "error")
		slog.Default().Warn("console cancel failed", "kind", kind, "name", name, "user", who, "err", redact.String(err.Error()))
		fail(w, http.StatusServiceUnavailable, "the cancel could not be written: "+apiReason(err))
		return
	}
	c.count(kind, "cancelled")
	slog.Default().Info("console cancel", "kind", kind, "name", name, "user", who)
	writeJSON(w, http.StatusAccepted, map[string]any{"kind": kind, "name": name, "cancel": true})
}

func (c *Console) count(kind, outcome string) {
	if c.OnCancel != nil {
		c.OnCancel(kind, outcome)
	}
}
