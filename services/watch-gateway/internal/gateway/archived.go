package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentplane/agentplane/libs/archive"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/runs"
)

// ArchivePath lists the archived runs of the runs namespace as JSON (ArchivedRunList);
// ArchivePath/UID and ArchivePath/KIND/NAME are one run in full (ArchivedRun, the newest of that
// name). The JSON is the gRPC messages' (protojson, field names as in the .proto).
const ArchivePath = "/api/agents/runs/archive"

// ResourceArchivedRuns is the aggregated API's resource of archived runs: list, and get by uid.
const ResourceArchivedRuns = "archivedruns"

// Archive is where the gateway reads archived runs (an *archive.Store).
type Archive interface {
	List(ctx context.Context, q archive.Query) (archive.Page, error)
	Get(ctx context.Context, uid string) (archive.Record, error)
}

// The parts of an archived run shown only to a caller allowed to read them live.
const (
	ArchiveEvents = "events" // list events
	ArchiveJobs   = "jobs"   // list jobs.batch
	ArchiveLogs   = "logs"   // get pods/log
)

var partVerbs = map[string]string{ArchiveEvents: "list", ArchiveJobs: "list", ArchiveLogs: "get"}

var partRights = map[string]string{ArchiveEvents: "list events", ArchiveJobs: "list jobs", ArchiveLogs: "get pods/log"}

// ArchiveAccess decides who reads the archive, with the rights live runs need: Kinds per run kind
// (AgentRun, OrchestrationRun), asked for list (a list) and get (one run); Parts per part of a
// run (ArchiveEvents, ArchiveJobs, ArchiveLogs). Each is a review of the caller in the runs
// namespace.
type ArchiveAccess struct {
	Kinds map[string]Authorizer
	Parts map[string]Authorizer
	// Check: requests straight to the gateway are authorized (token mode). Requests through the
	// aggregated API always are; without Check (none, mtls) a direct caller reads everything,
	// as it reads the streams.
	Check bool
}

type archived struct {
	store     Archive
	namespace string
	access    ArchiveAccess
}

// ServeArchive makes the gateway read archived runs of namespace (its runs namespace) from a.
func (g *Gateway) ServeArchive(a Archive, namespace string, acc ArchiveAccess) {
	g.archive = &archived{store: a, namespace: namespace, access: acc}
}

// noArchive is the answer of a gateway that reads no archive.
const noArchive = "this gateway reads no run archive: set JANGAR_ARCHIVE_URL (the watch-gateway chart's archive.url) to job-gc's PostgreSQL"

// may asks whether the caller may do verb with az's resource; nil az refuses.
type may func(ctx context.Context, az Authorizer, verb string) error

// archiveError is a refusal with what the transport needs: an HTTP code and a gRPC code.
type archiveError struct {
	http int
	grpc codes.Code
	msg  string
}

func (e *archiveError) Error() string { return e.msg }

func badArchiveRequest(format string, a ...any) error {
	return &archiveError{http: http.StatusBadRequest, grpc: codes.InvalidArgument, msg: fmt.Sprintf(format, a...)}
}

// accessFailure turns an access refusal into an archiveError.
func accessFailure(err error) error {
	switch access.KindOf(err) {
	case access.Unauthenticated:
		return &archiveError{http: http.StatusUnauthorized, grpc: codes.Unauthenticated, msg: err.Error()}
	case access.Forbidden:
		return &archiveError{http: http.StatusForbidden, grpc: codes.PermissionDenied, msg: err.Error()}
	}
	return &archiveError{http: http.StatusServiceUnavailable, grpc: codes.Unavailable, msg: err.Error()}
}

// storeFailure is a failed read of the database, or the caller's bad query.
func storeFailure(err error) error {
	if archive.IsBadQuery(err) {
		return &archiveError{http: http.StatusBadRequest, grpc: codes.InvalidArgument, msg: err.Error()}
	}
	return &archiveError{http: http.StatusServiceUnavailable, grpc: codes.Unavailable,
		msg: "the run archive cannot be read now (the gateway's log says why); retry shortly"}
}

// archiveKind is runs.KindOf with "" (no kind asked) allowed.
func archiveKind(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if k, ok := runs.KindOf(s); ok {
		return k, nil
	}
	return "", badArchiveRequest("kind %q must be AgentRun or OrchestrationRun", s)
}

// runKinds are the kinds the archive holds, in the order a list without a kind checks them.
var runKinds = []string{runs.KindAgentRun, runs.KindOrchestrationRun}

var resourceOf = map[string]string{runs.KindAgentRun: "agentruns", runs.KindOrchestrationRun: "orchestrationruns"}

func (a *archived) check(ctx context.Context, allow may, az Authorizer, verb string) error {
	if allow == nil {
		return nil
	}
	if az == nil {
		return &access.Error{Kind: access.Forbidden, Msg: "no access check is configured for this part of the archive"}
	}
	return allow(ctx, az, verb)
}

func (a *archived) namespaceOf(ns string) error {
	if ns != "" && ns != a.namespace {
		return &archiveError{http: http.StatusBadRequest, grpc: codes.FailedPrecondition,
			msg: fmt.Sprintf("this gateway serves the archived runs of namespace %q, not %q", a.namespace, ns)}
	}
	return nil
}

// list answers a ListArchivedRunsRequest for a caller allow decides for (nil: anyone).
func (a *archived) list(ctx context.Context, allow may, req *jangarv1.ListArchivedRunsRequest) (*jangarv1.ArchivedRunList, error) {
	if err := a.namespaceOf(req.GetNamespace()); err != nil {
		return nil, err
	}
	kind, err := archiveKind(req.GetKind())
	if err != nil {
		return nil, err
	}
	if req.GetLimit() < 0 || req.GetLimit() > 1000 {
		return nil, badArchiveRequest("limit %d must be between 1 and 1000 (0 for 100)", req.GetLimit())
	}
	out := &jangarv1.ArchivedRunList{}
	if kind != "" {
		if err := a.check(ctx, allow, a.access.Kinds[kind], "list"); err != nil {
			return nil, accessFailure(err)
		}
	} else {
		// No kind asked: the kinds the caller may list.
		var allowed []string
		var refusal error
		for _, k := range runKinds {
			err := a.check(ctx, allow, a.access.Kinds[k], "list")
			switch {
			case err == nil:
				allowed = append(allowed, k)
			case access.KindOf(err) != access.Forbidden:
				return nil, accessFailure(err) // not signed in, or the API server did not answer
			default:
				refusal = err
				out.Hidden = append(out.Hidden, fmt.Sprintf("%ss are not listed: you may not list %s in %s", k, resourceOf[k], a.namespace))
			}
		}
		switch len(allowed) {
		case 0:
			return nil, accessFailure(refusal)
		case 1:
			kind = allowed[0]
		}
	}
	q := archive.Query{Namespace: a.namespace, Kind: kind, Name: req.GetName(), Agent: req.GetAgent(), Phase: req.GetPhase(),
		Limit: int(req.GetLimit()), Cursor: req.GetCursor()}
	if req.GetFinishedAfter() != nil {
		q.Since = req.GetFinishedAfter().AsTime()
	}
	if req.GetFinishedBefore() != nil {
		q.Until = req.GetFinishedBefore().AsTime()
	}
	page, err := a.store.List(ctx, q)
	if err != nil {
		return nil, storeFailure(err)
	}
	out.NextCursor = page.Next
	for _, r := range page.Runs {
		out.Runs = append(out.Runs, summaryProto(r))
	}
	return out, nil
}

// get answers a GetArchivedRunRequest for a caller allow decides for (nil: anyone).
func (a *archived) get(ctx context.Context, allow may, req *jangarv1.GetArchivedRunRequest) (*jangarv1.ArchivedRun, error) {
	if err := a.namespaceOf(req.GetNamespace()); err != nil {
		return nil, err
	}
	uid := req.GetUid()
	kind, err := archiveKind(req.GetKind())
	if err != nil {
		return nil, err
	}
	notFound := func(what string) error {
		return &archiveError{http: http.StatusNotFound, grpc: codes.NotFound,
			msg: fmt.Sprintf("no archived run %s in namespace %s (job-gc archives a run when it finishes, before it is deleted)", what, a.namespace)}
	}
	if uid == "" {
		if kind == "" || req.GetName() == "" {
			return nil, badArchiveRequest("name a run by its uid, or by kind and name")
		}
		// Asked by name: the caller must be allowed to get the kind before learning whether it
		// is there.
		if err := a.check(ctx, allow, a.access.Kinds[kind], "get"); err != nil {
			return nil, accessFailure(err)
		}
		page, err := a.store.List(ctx, archive.Query{Namespace: a.namespace, Kind: kind, Name: req.GetName(), Limit: 1})
		if err != nil {
			return nil, storeFailure(err)
		}
		if len(page.Runs) == 0 {
			return nil, notFound(kind + "/" + req.GetName())
		}
		uid = page.Runs[0].UID
	} else if err := a.mayGetSome(ctx, allow); err != nil {
		// Asked by uid: who may get neither kind learns nothing of what is archived.
		return nil, accessFailure(err)
	}
	rec, err := a.store.Get(ctx, uid)
	if errors.Is(err, archive.ErrNotFound) || (err == nil && rec.Namespace != a.namespace) {
		return nil, notFound("with uid " + uid)
	}
	if err != nil {
		return nil, storeFailure(err)
	}
	if kind != "" && rec.Kind != kind {
		return nil, notFound(kind + " with uid " + uid)
	}
	if err := a.check(ctx, allow, a.access.Kinds[rec.Kind], "get"); err != nil {
		return nil, accessFailure(err)
	}
	out := &jangarv1.ArchivedRun{Summary: summaryProto(rec.Summary)}
	if len(rec.Object) > 0 {
		var m map[string]any
		if err := json.Unmarshal(rec.Object, &m); err == nil {
			if s, err := structpb.NewStruct(m); err == nil {
				out.Object = s
			}
		}
	}
	a.parts(ctx, allow, rec, out)
	return out, nil
}

// mayGetSome is nil when the caller may get runs of some kind, else the reason it may not.
func (a *archived) mayGetSome(ctx context.Context, allow may) error {
	var refusal error
	for _, k := range runKinds {
		err := a.check(ctx, allow, a.access.Kinds[k], "get")
		if err == nil {
			return nil
		}
		if refusal == nil || access.KindOf(err) != access.Forbidden {
			refusal = err
		}
	}
	return refusal
}

// parts adds to out the parts of rec the caller may read, and names the others in out.Hidden.
func (a *archived) parts(ctx context.Context, allow may, rec archive.Record, out *jangarv1.ArchivedRun) {
	for _, part := range []string{ArchiveEvents, ArchiveJobs, ArchiveLogs} {
		if err := a.check(ctx, allow, a.access.Parts[part], partVerbs[part]); err != nil {
			if access.KindOf(err) == access.Forbidden {
				out.Hidden = append(out.Hidden, fmt.Sprintf("%s not shown: you may not %s in %s", part, partRights[part], a.namespace))
			} else {
				out.Hidden = append(out.Hidden, part+" not shown: your access to them could not be checked now; retry shortly")
			}
			continue
		}
		switch part {
		case ArchiveEvents:
			for _, e := range rec.Events {
				out.Events = append(out.Events, &jangarv1.ArchivedEvent{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count,
					First: stamp(e.First), Last: stamp(e.Last), Source: e.Source, Involved: e.Involved})
			}
		case ArchiveJobs:
			for _, j := range rec.Jobs {
				out.Jobs = append(out.Jobs, &jangarv1.ArchivedJob{Name: j.Name, Step: j.Step, Succeeded: j.Succeeded, ExitCode: j.ExitCode,
					Reason: j.Reason, Message: j.Message, Started: stamp(j.Started), Finished: stamp(j.Finished)})
			}
		case ArchiveLogs:
			for _, l := range rec.Logs {
				out.Logs = append(out.Logs, &jangarv1.ArchivedLog{Pod: l.Pod, Container: l.Container, Tail: l.Tail, Truncated: l.Truncated, Error: l.Error})
			}
		}
	}
}

func summaryProto(s archive.Summary) *jangarv1.ArchivedRunSummary {
	return &jangarv1.ArchivedRunSummary{Uid: s.UID, Kind: s.Kind, Namespace: s.Namespace, Name: s.Name, Agent: s.Agent, Phase: s.Phase,
		CreatedAt: stamp(s.CreatedAt), FinishedAt: stamp(s.FinishedAt), ArchivedAt: stamp(s.ArchivedAt)}
}

func stamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// ListArchivedRuns lists archived runs (see the .proto).
func (g *Gateway) ListArchivedRuns(ctx context.Context, req *jangarv1.ListArchivedRunsRequest) (*jangarv1.ArchivedRunList, error) {
	if g.archive == nil {
		return nil, status.Error(codes.FailedPrecondition, noArchive)
	}
	out, err := g.archive.list(ctx, g.grpcMay(), req)
	return out, g.grpcArchiveError(err)
}

// GetArchivedRun returns one archived run (see the .proto).
func (g *Gateway) GetArchivedRun(ctx context.Context, req *jangarv1.GetArchivedRunRequest) (*jangarv1.ArchivedRun, error) {
	if g.archive == nil {
		return nil, status.Error(codes.FailedPrecondition, noArchive)
	}
	out, err := g.archive.get(ctx, g.grpcMay(), req)
	return out, g.grpcArchiveError(err)
}

// grpcMay checks a gRPC caller's bearer token (token mode), or nobody.
func (g *Gateway) grpcMay() may {
	if !g.archive.access.Check {
		return nil
	}
	return func(ctx context.Context, az Authorizer, verb string) error {
		_, err := az.Check(ctx, grpcToken(ctx), verb)
		return err
	}
}

func (g *Gateway) grpcArchiveError(err error) error {
	if err == nil {
		return nil
	}
	var ae *archiveError
	if errors.As(err, &ae) {
		if ae.grpc == codes.Unauthenticated || ae.grpc == codes.PermissionDenied {
			g.metrics.denied.WithLabelValues("grpc", map[codes.Code]string{codes.Unauthenticated: "unauthenticated", codes.PermissionDenied: "forbidden"}[ae.grpc]).Inc()
		}
		return status.Error(ae.grpc, ae.msg)
	}
	return status.Error(codes.Internal, err.Error())
}

// httpMay checks the credential r presents: always for the aggregated API (the API server
// vouched for the user), in token mode for requests straight to the gateway.
func (g *Gateway) httpMay(r *http.Request) may {
	cred := g.credential(r)
	if cred.User == nil && !g.archive.access.Check {
		return nil
	}
	return func(ctx context.Context, az Authorizer, verb string) error {
		_, err := g.allowed(ctx, az, cred, verb)
		return err
	}
}

// ArchiveHandler serves ArchivePath: GET ?kind=&name=&agent=&phase=&since=&until=&limit=&cursor=
// (since and until RFC 3339 times, or durations before now such as 24h), and ArchivePath/UID or
// ArchivePath/KIND/NAME.
func (g *Gateway) ArchiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.archive == nil {
			http.Error(w, noArchive, http.StatusNotFound)
			return
		}
		rest := strings.Trim(strings.TrimPrefix(r.URL.Path, ArchivePath), "/")
		var parts []string
		if rest != "" {
			parts = strings.Split(rest, "/")
		}
		q := r.URL.Query()
		switch len(parts) {
		case 0:
			g.serveArchiveList(w, r, q.Get("namespace"))
		case 1:
			g.serveArchivedRun(w, r, &jangarv1.GetArchivedRunRequest{Namespace: q.Get("namespace"), Uid: parts[0]})
		case 2:
			g.serveArchivedRun(w, r, &jangarv1.GetArchivedRunRequest{Namespace: q.Get("namespace"), Kind: parts[0], Name: parts[1]})
		default:
			http.Error(w, "no such path: "+ArchivePath+" lists, "+ArchivePath+"/UID and "+ArchivePath+"/KIND/NAME get one run", http.StatusNotFound)
		}
	})
}

// archiveListRequest reads a list's query parameters.
func archiveListRequest(r *http.Request, namespace string, now time.Time) (*jangarv1.ListArchivedRunsRequest, error) {
	q := r.URL.Query()
	req := &jangarv1.ListArchivedRunsRequest{Namespace: namespace, Kind: q.Get("kind"), Name: q.Get("name"), Agent: q.Get("agent"),
		Phase: q.Get("phase"), Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return nil, badArchiveRequest("limit %q must be a number from 1 to 1000", v)
		}
		req.Limit = int32(n) //nolint:gosec // G115: bounded above
	}
	for _, p := range []struct {
		name string
		into **timestamppb.Timestamp
	}{{"since", &req.FinishedAfter}, {"until", &req.FinishedBefore}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := whenOf(v, now)
		if err != nil {
			return nil, badArchiveRequest("%s %q must be an RFC 3339 time (2026-12-01T00:00:00Z) or a duration before now (24h)", p.name, v)
		}
		*p.into = timestamppb.New(t)
	}
	return req, nil
}

// whenOf reads an RFC 3339 time, or a positive duration before now.
func whenOf(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, errors.New("neither a time nor a positive duration")
	}
	return now.Add(-d), nil
}

func (g *Gateway) serveArchiveList(w http.ResponseWriter, r *http.Request, namespace string) {
	req, err := archiveListRequest(r, namespace, time.Now())
	if err == nil {
		var out *jangarv1.ArchivedRunList
		if out, err = g.archive.list(r.Context(), g.httpMay(r), req); err == nil {
			writeProto(w, out)
			return
		}
	}
	g.httpArchiveError(w, err)
}

func (g *Gateway) serveArchivedRun(w http.ResponseWriter, r *http.Request, req *jangarv1.GetArchivedRunRequest) {
	out, err := g.archive.get(r.Context(), g.httpMay(r), req)
	if err != nil {
		g.httpArchiveError(w, err)
		return
	}
	writeProto(w, out)
}

func (g *Gateway) httpArchiveError(w http.ResponseWriter, err error) {
	var ae *archiveError
	if !errors.As(err, &ae) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	switch ae.http {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentplane"`)
		g.metrics.denied.WithLabelValues("sse", "unauthenticated").Inc()
	case http.StatusForbidden:
		g.metrics.denied.WithLabelValues("sse", "forbidden").Inc()
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "5")
	}
	http.Error(w, ae.msg, ae.http)
}

// archiveJSON writes the messages with the .proto's field names.
var archiveJSON = protojson.MarshalOptions{UseProtoNames: true}

func writeProto(w http.ResponseWriter, m proto.Message) {
	raw, err := archiveJSON.Marshal(m)
	var buf bytes.Buffer
	if err == nil {
		err = json.Compact(&buf, raw) // protojson varies its spacing on purpose; the answer does not
	}
	if err != nil {
		http.Error(w, "encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	b := buf.Bytes()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n')) //nolint:gosec // G705: protojson served as application/json, never HTML
}

// ServesArchive reports whether the gateway reads a run archive.
func (g *Gateway) ServesArchive() bool { return g.archive != nil }
