package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	authnv1 "k8s.io/api/authentication/v1"

	"github.com/agentplane/agentplane/libs/health"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/history"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/session"
)

// StreamPath is the seed's SSE endpoint.
const StreamPath = "/api/agents/control-plane/status/stream"

// RunsStreamPath is the runs stream: the namespace's AgentRuns and OrchestrationRuns, with the
// health stream's events, cursors and parameters (package runs says what an item holds).
const RunsStreamPath = "/api/agents/runs/stream"

// Limits on a client's heartbeat override.
const (
	minHeartbeat     = time.Second
	maxHeartbeat     = 5 * time.Minute
	keepAliveDefault = 15 * time.Second
	retryMillis      = 1000
)

// Gateway serves the hub over SSE and gRPC, and the runs hub over SSE.
type Gateway struct {
	jangarv1.UnimplementedAgentctlServiceServer
	hub       *health.Hub
	runs      feed
	sessions  *session.Keys
	history   *history.Store
	archive   *archived
	namespace string
	heartbeat time.Duration
	limits    *streamLimits
	metrics   *Metrics
	auth      Authorizer
	recheck   time.Duration
	keepAlive time.Duration // between keep-alive comments on an idle SSE stream

	detachedMu sync.Mutex
	detached   map[*detachedConn]struct{}
	closing    bool
}

// Authorizer decides whether a bearer token, or a user already signed in to the console, may
// read what a stream serves (access.Reviewer).
type Authorizer interface {
	Check(ctx context.Context, token, verb string) (user string, err error)
	CheckUser(ctx context.Context, u authnv1.UserInfo, verb string) error
}

// Credential is what a request presents: a bearer token, or the user of a console session.
type Credential struct {
	// Token is the bearer token presented, or the one a console session was signed in with: it is
	// reviewed again at each check (a revoked token or a deleted ServiceAccount ends access, and
	// the groups are the API server's of now).
	Token string
	// Session is the console session cookie the user came with (checked again on every
	// re-check: a rotated key ends it), Expires when the credential ends (the session's, or the
	// token's own expiry): an open stream ends then.
	Session string
	Expires time.Time
	// User is set instead of a token for a request the Kubernetes API server authenticated and
	// proxied (the aggregated API): only its authorization is checked, again at each re-check.
	User *authnv1.UserInfo
}

// feed is one SSE stream: its hub and who may read it (nil: anyone).
type feed struct {
	hub  *health.Hub
	auth Authorizer
}

// RequireToken makes every stream and status call present a bearer token that auth accepts;
// open streams are checked again every recheck and end when access is gone.
func (g *Gateway) RequireToken(auth Authorizer, recheck time.Duration) {
	g.auth, g.recheck = auth, recheck
}

// ServeRuns serves hub on the runs stream; with token access on, readers must be allowed by auth
// (asked for verb watch).
func (g *Gateway) ServeRuns(hub *health.Hub, auth Authorizer) {
	g.runs = feed{hub: hub, auth: auth}
}

// AcceptSessions lets the streams accept a console session cookie instead of a bearer token.
func (g *Gateway) AcceptSessions(k *session.Keys) { g.sessions = k }

// RunsHandler serves RunsStreamPath.
func (g *Gateway) RunsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.runs.hub == nil {
			http.Error(w, "this gateway serves no runs stream", http.StatusNotFound)
			return
		}
		g.serveFeed(w, r, g.runs)
	})
}

// credential is what r presents: the user the API server vouched for (the aggregated API), else
// its bearer token, else its console session's user.
func (g *Gateway) credential(r *http.Request) Credential {
	if u, ok := r.Context().Value(userKey{}).(authnv1.UserInfo); ok {
		return Credential{User: &u}
	}
	if token, ok := access.BearerToken(r.Header.Get("Authorization")); ok {
		return Credential{Token: token, Expires: access.TokenExpiry(token)}
	}
	if s, ok := g.sessions.FromRequest(r); ok && !s.Anonymous() {
		token, err := g.sessions.Token(s)
		if err != nil {
			return Credential{}
		}
		c, _ := r.Cookie(g.sessions.CookieNameOf())
		return Credential{Token: token, Session: c.Value, Expires: time.Unix(s.Expires, 0)}
	}
	return Credential{}
}

// allowed asks auth whether cred may do verb: a credential that has expired, or a session the
// gateway's keys no longer sign (the key was rotated), may not.
func (g *Gateway) allowed(ctx context.Context, auth Authorizer, cred Credential, verb string) (user string, err error) {
	if !cred.Expires.IsZero() && !time.Now().Before(cred.Expires) {
		return "", &access.Error{Kind: access.Unauthenticated, Msg: "the credential expired at " + cred.Expires.UTC().Format(time.RFC3339) + ": sign in again (or send a new token)"}
	}
	if cred.Session != "" {
		if _, err := g.sessions.Decode(cred.Session); err != nil {
			return "", &access.Error{Kind: access.Unauthenticated, Msg: err.Error()}
		}
	}
	if cred.User != nil {
		return cred.User.Username, auth.CheckUser(ctx, *cred.User, verb)
	}
	return auth.Check(ctx, cred.Token, verb)
}

var _ jangarv1.AgentctlServiceServer = (*Gateway)(nil)

// Metrics are the seed's server metrics.
type Metrics struct {
	active   *prometheus.GaugeVec
	errors   *prometheus.CounterVec
	Dispatch prometheus.Histogram
	denied   *prometheus.CounterVec
	limited  *prometheus.CounterVec
	Reviews  *prometheus.CounterVec
}

// NewMetrics registers them with reg (nil: a private registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agentplane_watch_active_streams", Help: "Open status watches by transport."}, []string{"transport"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_watch_stream_errors_total", Help: "Status watches ended by an error, by transport and reason."}, []string{"transport", "reason"}),
		Dispatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentplane_watch_delta_dispatch_seconds",
			Help: "Time from a delta's generation to its hand-off to a watcher (SSE over HTTP/1.1: to the end of its write into the watcher's socket).", Buckets: prometheus.ExponentialBuckets(0.00001, 2, 20)}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_watch_access_denied_total", Help: "Requests refused by access control, by transport and reason."}, []string{"transport", "reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_watch_streams_limited_total",
			Help: "Watches refused for a bound: total (JANGAR_WATCH_MAX_STREAMS) or caller (per user or per client address)."}, []string{"bound"}),
		Reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_watch_access_reviews_total",
			Help: "TokenReviews (kind=token) and SubjectAccessReviews (kind=access) sent to the API server; cached decisions are not counted."}, []string{"kind"}),
	}
	// The error series exist from the start, so alerts on rate() see the first error.
	for _, tr := range [][2]string{{"sse", "access"}, {"sse", "write"}, {"sse", "lagged"}, {"grpc", "access"}, {"grpc", "send"}, {"grpc", "lagged"}} {
		m.errors.WithLabelValues(tr[0], tr[1])
	}
	for _, tr := range []string{"sse", "grpc"} {
		for _, reason := range []string{"unauthenticated", "forbidden", "unavailable"} {
			m.denied.WithLabelValues(tr, reason)
		}
	}
	m.limited.WithLabelValues("total")
	m.limited.WithLabelValues("caller")
	reg.MustRegister(m.active, m.errors, m.Dispatch, m.denied, m.limited, m.Reviews)
	return m
}

// NewGateway serves hub for namespace; heartbeat is the default interval, maxActive bounds the
// open watches (beyond it: 503 / UNAVAILABLE; LimitPerCaller adds per-user and per-address bounds,
// beyond which a caller gets 429 / RESOURCE_EXHAUSTED).
func NewGateway(hub *health.Hub, namespace string, heartbeat time.Duration, maxActive int, m *Metrics) *Gateway {
	if m == nil {
		m = NewMetrics(nil)
	}
	hub.OnDispatch = func(d time.Duration) { m.Dispatch.Observe(d.Seconds()) }
	return &Gateway{hub: hub, namespace: namespace, heartbeat: heartbeat, limits: newStreamLimits(maxActive, 0, 0), metrics: m,
		keepAlive: keepAliveDefault, detached: map[*detachedConn]struct{}{}}
}

func (g *Gateway) isClosing() bool {
	g.detachedMu.Lock()
	defer g.detachedMu.Unlock()
	return g.closing
}

// LimitPerCaller bounds the watches one user (perUser) and one client address (perAddr, loopback
// not counted) may hold open at once; 0 leaves that bound off.
func (g *Gateway) LimitPerCaller(perUser, perAddr int) {
	g.limits.perUser, g.limits.perAddr = perUser, perAddr
}

// acquire takes a watch slot for user from remoteAddr; release returns it.
func (g *Gateway) acquire(user, remoteAddr string) (release func(), err *limitError) {
	release, err = g.limits.take(user, remoteAddr)
	if err != nil {
		bound := "caller"
		if err.total {
			bound = "total"
		}
		g.metrics.limited.WithLabelValues(bound).Inc()
	}
	return release, err
}

func (g *Gateway) parseHeartbeat(s string) (time.Duration, error) {
	if s == "" {
		return g.heartbeat, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < minHeartbeat || d > maxHeartbeat {
		return 0, fmt.Errorf("heartbeat %q must be a duration between %s and %s, such as 30s", s, minHeartbeat, maxHeartbeat)
	}
	return d, nil
}

// firstStatusWait bounds how long a request made right after start-up waits for the collector's
// first status instead of getting an empty snapshot.
const firstStatusWait = 10 * time.Second

func waitReady(ctx context.Context, hub *health.Hub) {
	t := time.NewTimer(firstStatusWait)
	defer t.Stop()
	select {
	case <-hub.Ready():
	case <-ctx.Done():
	case <-t.C:
	}
}

// ServeHTTP serves GET /api/agents/control-plane/status/stream.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.serveFeed(w, r, feed{hub: g.hub, auth: g.auth})
}

// serveFeed serves one SSE stream.
func (g *Gateway) serveFeed(w http.ResponseWriter, r *http.Request, f feed) {
	if r.Method != http.MethodGet { // a GET pattern also matches HEAD, which must get no body
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "the status stream answers GET only", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	if ns := q.Get("namespace"); ns != "" && ns != g.namespace {
		http.Error(w, fmt.Sprintf("this gateway reports namespace %q, not %q", g.namespace, ns), http.StatusBadRequest)
		return
	}
	hb, err := g.parseHeartbeat(q.Get("heartbeat"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	format := q.Get("format")
	if format == "" {
		format = "json"
	}
	if format != "json" && format != "ndjson" {
		http.Error(w, fmt.Sprintf("format %q must be json or ndjson", format), http.StatusBadRequest)
		return
	}
	// A browser's EventSource reconnects to the same URL with the Last-Event-ID it last saw: the
	// header is newer than a ?since= in the URL, so it wins.
	since := r.Header.Get("Last-Event-ID")
	if since == "" {
		since = q.Get("since")
	}
	cred := g.credential(r)
	user, err := g.authorizeHTTP(r.Context(), w, f.auth, cred)
	if err != nil {
		return
	}
	if g.isClosing() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the gateway is shutting down; retry", http.StatusServiceUnavailable)
		return
	}
	release, limited := g.acquire(user, r.RemoteAddr)
	if limited != nil {
		w.Header().Set("Retry-After", "5")
		code := http.StatusTooManyRequests // this caller's bound
		if limited.total {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, limited.Error(), code)
		return
	}
	if g.serveDetached(w, r, f, format == "ndjson", hb, since, cred, release) {
		return // the connection is the hub's now; it releases the slot when it closes
	}
	defer release()
	g.serveStreaming(w, r, f, format, hb, since, cred)
}

// serveStreaming serves a watch from this goroutine until it ends (HTTP/2, or any connection
// that cannot be taken over).
func (g *Gateway) serveStreaming(w http.ResponseWriter, r *http.Request, f feed, format string, hb time.Duration, since string, cred Credential) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	g.metrics.active.WithLabelValues("sse").Inc()
	defer g.metrics.active.WithLabelValues("sse").Dec()
	// The server's read and write deadlines bound requests, not this response, which runs until
	// the watcher goes (an HTTP/2 stream: the server's own read loop watches the connection).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})

	h := w.Header()
	if format == "json" {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("Retry", fmt.Sprint(retryMillis))
	w.WriteHeader(http.StatusOK)

	waitReady(r.Context(), f.hub)
	initial, sub := f.hub.Subscribe(since, false)
	defer sub.Close()
	write := func(ev health.Event) error {
		var b []byte
		if format == "ndjson" {
			b = encodeNDJSON(ev)
		} else {
			b = encodeSSE(ev)
		}
		_, err := w.Write(b) //nolint:gosec // G705: JSON-encoded events on a text/event-stream or NDJSON response, never HTML
		flusher.Flush()
		return err
	}
	if format == "json" {
		fmt.Fprintf(w, "retry: %d\n\n", retryMillis)
	}
	last := sub.At() // heartbeats carry the last delivered position, never one ahead of it
	for _, ev := range initial {
		if write(ev) != nil {
			return
		}
	}
	heartbeat := time.NewTicker(hb)
	defer heartbeat.Stop()
	alive := time.NewTicker(g.keepAlive)
	defer alive.Stop()
	recheck, stopRecheck := g.recheckTicker(f.auth)
	defer stopRecheck()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-recheck:
			if err := g.stillAllowed(r.Context(), f.auth, cred, access.VerbWatch); err != nil {
				g.metrics.errors.WithLabelValues("sse", "access").Inc()
				_ = write(health.Event{Type: health.ErrorEv, GeneratedAt: time.Now(), Message: err.Error()})
				return
			}
		case ev := <-sub.Events():
			if write(ev) != nil {
				g.metrics.errors.WithLabelValues("sse", "write").Inc()
				return
			}
			last = ev.Cursor
		case <-sub.Lagged():
			g.metrics.errors.WithLabelValues("sse", "lagged").Inc()
			_ = write(health.Event{Type: health.ErrorEv, GeneratedAt: time.Now(), Message: "this watch fell behind; reconnect with the last event id to resume"})
			return
		case <-heartbeat.C:
			if write(health.HeartbeatAt(last)) != nil {
				return
			}
		case <-alive.C:
			if format == "json" {
				if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
					return
				}
				flusher.Flush()
			}
		}
	}
}

// GetControlPlaneStatus returns the current status.
func (g *Gateway) GetControlPlaneStatus(ctx context.Context, req *jangarv1.GetControlPlaneStatusRequest) (*jangarv1.ControlPlaneStatus, error) {
	if ns := req.GetNamespace(); ns != "" && ns != g.namespace {
		return nil, status.Errorf(codes.FailedPrecondition, "this gateway reports namespace %q, not %q", g.namespace, ns)
	}
	if _, err := g.authorizeGRPC(ctx, access.VerbGet); err != nil {
		return nil, err
	}
	waitReady(ctx, g.hub)
	cur := g.hub.Current()
	return &jangarv1.ControlPlaneStatus{GeneratedAt: timestamppb.New(cur.GeneratedAt), Items: toProto(cur.Items)}, nil
}

var eventTypes = map[health.EventType]jangarv1.ControlPlaneStatusEvent_Type{
	health.Snapshot: jangarv1.ControlPlaneStatusEvent_SNAPSHOT, health.Delta: jangarv1.ControlPlaneStatusEvent_DELTA,
	health.Heartbeat: jangarv1.ControlPlaneStatusEvent_HEARTBEAT, health.ErrorEv: jangarv1.ControlPlaneStatusEvent_ERROR,
}

// WatchControlPlaneStatus streams snapshot, deltas and heartbeats.
func (g *Gateway) WatchControlPlaneStatus(req *jangarv1.WatchControlPlaneStatusRequest, stream jangarv1.AgentctlService_WatchControlPlaneStatusServer) error {
	if ns := req.GetNamespace(); ns != "" && ns != g.namespace {
		return status.Errorf(codes.FailedPrecondition, "this gateway reports namespace %q, not %q", g.namespace, ns)
	}
	hb := g.heartbeat
	if req.GetHeartbeat() != nil {
		d := req.GetHeartbeat().AsDuration()
		if d < minHeartbeat || d > maxHeartbeat {
			return status.Errorf(codes.InvalidArgument, "heartbeat %s must be between %s and %s", d, minHeartbeat, maxHeartbeat)
		}
		hb = d
	}
	user, err := g.authorizeGRPC(stream.Context(), access.VerbWatch)
	if err != nil {
		return err
	}
	remote := ""
	if p, ok := peer.FromContext(stream.Context()); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	release, limited := g.acquire(user, remote)
	if limited != nil {
		if limited.total {
			return status.Error(codes.Unavailable, limited.Error())
		}
		return status.Error(codes.ResourceExhausted, limited.Error())
	}
	defer release()
	g.metrics.active.WithLabelValues("grpc").Inc()
	defer g.metrics.active.WithLabelValues("grpc").Dec()
	waitReady(stream.Context(), g.hub)
	initial, sub := g.hub.Subscribe(req.GetCursor(), req.GetFollowOnly())
	defer sub.Close()
	send := func(ev health.Event) error {
		return stream.Send(&jangarv1.ControlPlaneStatusEvent{Type: eventTypes[ev.Type], GeneratedAt: timestamppb.New(ev.GeneratedAt),
			Items: toProto(ev.Items), Message: ev.Message, Cursor: ev.Cursor})
	}
	last := sub.At()
	for _, ev := range initial {
		if err := send(ev); err != nil {
			return err
		}
	}
	t := time.NewTicker(hb)
	defer t.Stop()
	recheck, stopRecheck := g.recheckTicker(g.auth)
	defer stopRecheck()
	cred := Credential{Token: grpcToken(stream.Context())}
	cred.Expires = access.TokenExpiry(cred.Token)
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-recheck:
			if err := g.stillAllowed(stream.Context(), g.auth, cred, access.VerbWatch); err != nil {
				g.metrics.errors.WithLabelValues("grpc", "access").Inc()
				return grpcAccessError(err)
			}
		case ev := <-sub.Events():
			if err := send(ev); err != nil {
				g.metrics.errors.WithLabelValues("grpc", "send").Inc()
				return err
			}
			last = ev.Cursor
		case <-sub.Lagged():
			g.metrics.errors.WithLabelValues("grpc", "lagged").Inc()
			return status.Error(codes.Unavailable, "this watch fell behind; reconnect with the last cursor to resume")
		case <-t.C:
			if err := send(health.HeartbeatAt(last)); err != nil {
				return err
			}
		}
	}
}

// authorizeHTTP answers 401, 403 or 503 and returns an error when the request may not proceed.
// It returns the user the credential belongs to ("" when streams are not authenticated).
func (g *Gateway) authorizeHTTP(ctx context.Context, w http.ResponseWriter, auth Authorizer, cred Credential) (string, error) {
	return g.authorizeHTTPVerb(ctx, w, auth, cred, access.VerbWatch)
}

// authorizeHTTPVerb is authorizeHTTP for any verb.
func (g *Gateway) authorizeHTTPVerb(ctx context.Context, w http.ResponseWriter, auth Authorizer, cred Credential, verb string) (string, error) {
	if auth == nil {
		return "", nil
	}
	user, err := g.allowed(ctx, auth, cred, verb)
	if err == nil {
		return user, nil
	}
	code := http.StatusServiceUnavailable
	switch access.KindOf(err) {
	case access.Unauthenticated:
		code = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentplane"`)
	case access.Forbidden:
		code = http.StatusForbidden
	default:
		w.Header().Set("Retry-After", "1")
	}
	g.metrics.denied.WithLabelValues("sse", reasonOf(err)).Inc()
	http.Error(w, err.Error(), code)
	return "", err
}

func (g *Gateway) authorizeGRPC(ctx context.Context, verb string) (user string, err error) {
	if g.auth == nil {
		return "", nil
	}
	if user, err = g.auth.Check(ctx, grpcToken(ctx), verb); err != nil {
		g.metrics.denied.WithLabelValues("grpc", reasonOf(err)).Inc()
		return "", grpcAccessError(err)
	}
	return user, nil
}

// stillAllowed re-checks an open stream's credential: a refusal ends the stream, a failed review
// (API server unreachable) does not.
func (g *Gateway) stillAllowed(ctx context.Context, auth Authorizer, cred Credential, verb string) error {
	_, err := g.allowed(ctx, auth, cred, verb)
	if err != nil && access.KindOf(err) != access.Unavailable {
		return fmt.Errorf("access ended: %w", err)
	}
	return nil
}

func (g *Gateway) recheckTicker(auth Authorizer) (<-chan time.Time, func()) {
	if auth == nil || g.recheck <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(g.recheck)
	return t.C, t.Stop
}

func reasonOf(err error) string {
	switch access.KindOf(err) {
	case access.Unauthenticated:
		return "unauthenticated"
	case access.Forbidden:
		return "forbidden"
	}
	return "unavailable"
}

func grpcToken(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := access.BearerToken(v); ok {
			return t
		}
	}
	return ""
}

func grpcAccessError(err error) error {
	switch access.KindOf(err) {
	case access.Unauthenticated:
		return status.Error(codes.Unauthenticated, err.Error())
	case access.Forbidden:
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

func toProto(items []health.Item) []*jangarv1.ControlPlaneStatusItem {
	out := make([]*jangarv1.ControlPlaneStatusItem, 0, len(items))
	for _, it := range items {
		pi := &jangarv1.ControlPlaneStatusItem{Component: it.Component, Namespace: it.Namespace, Status: string(it.Status), Message: it.Message}
		if len(it.Details) > 0 {
			if s, err := structpb.NewStruct(it.Details); err == nil {
				pi.Details = s
			}
		}
		out = append(out, pi)
	}
	return out
}

// AllOf allows what every one of its Authorizers allows (the runs stream: watching AgentRuns
// and OrchestrationRuns).
type AllOf []Authorizer

// Check asks each in turn; the first refusal is the answer.
func (a AllOf) Check(ctx context.Context, token, verb string) (string, error) {
	user := ""
	for _, az := range a {
		u, err := az.Check(ctx, token, verb)
		if err != nil {
			return u, err
		}
		user = u
	}
	return user, nil
}

// CheckUser asks each in turn; the first refusal is the answer.
func (a AllOf) CheckUser(ctx context.Context, u authnv1.UserInfo, verb string) error {
	for _, az := range a {
		if err := az.CheckUser(ctx, u, verb); err != nil {
			return err
		}
	}
	return nil
}
