package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/history"
)

// HistoryPath serves the recorded status transitions as JSON.
const HistoryPath = "/api/agents/control-plane/status/history"

// Bounds of a history request.
const (
	defaultHistorySince = time.Hour
	defaultHistoryLimit = 1000
	maxHistoryLimit     = 10000
)

// noHistory is the answer of a gateway without Redis.
const noHistory = "this gateway keeps no status history: it needs Redis (JANGAR_REDIS_URL, or the chart's redis.url)"

// KeepHistory serves the timeline recorded in h.
func (g *Gateway) KeepHistory(h *history.Store) { g.history = h }

// historyReply is the JSON of HistoryPath.
type historyReply struct {
	GeneratedAt time.Time `json:"generated_at"`
	Since       string    `json:"since"`
	Retention   string    `json:"retention"`
	Truncated   bool      `json:"truncated"`
	// Oldest is when the oldest transition kept was seen (absent when none is).
	Oldest      *time.Time           `json:"oldest,omitempty"`
	Transitions []history.Transition `json:"transitions"`
}

// parseHistoryParams reads since (a duration) and limit.
func parseHistoryParams(since string, limit int) (time.Duration, int, error) {
	d := defaultHistorySince
	if since != "" {
		var err error
		if d, err = time.ParseDuration(since); err != nil || d <= 0 {
			return 0, 0, fmt.Errorf("since %q must be a positive duration, such as 2h", since)
		}
	}
	if limit == 0 {
		limit = defaultHistoryLimit
	}
	if limit < 0 || limit > maxHistoryLimit {
		return 0, 0, fmt.Errorf("limit %d must be between 1 and %d", limit, maxHistoryLimit)
	}
	return d, limit, nil
}

// HistoryHandler serves GET HistoryPath?since=2h&limit=1000 to whoever may get the status.
func (g *Gateway) HistoryHandler() http.Handler {
	return g.historyFor(func() Authorizer { return g.auth })
}

// historyFor serves the history to whoever auth (asked at each request) allows to get the status.
func (g *Gateway) historyFor(auth func() Authorizer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if ns := q.Get("namespace"); ns != "" && ns != g.namespace {
			http.Error(w, fmt.Sprintf("this gateway reports namespace %q, not %q", g.namespace, ns), http.StatusBadRequest)
			return
		}
		limit := 0
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				http.Error(w, fmt.Sprintf("limit %q must be a number", v), http.StatusBadRequest)
				return
			}
			limit = n
		}
		since, limit, err := parseHistoryParams(q.Get("since"), limit)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := g.authorizeHTTPVerb(r.Context(), w, auth(), g.credential(r), access.VerbGet); err != nil {
			return
		}
		if g.history == nil {
			http.Error(w, noHistory, http.StatusNotFound)
			return
		}
		items, truncated, err := g.history.Since(r.Context(), since, limit)
		if err != nil {
			w.Header().Set("Retry-After", "5")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if items == nil {
			items = []history.Transition{}
		}
		reply := historyReply{GeneratedAt: time.Now().UTC(), Since: since.String(), Retention: g.history.Retention().String(),
			Truncated: truncated, Transitions: items}
		if oldest, ok, err := g.history.Oldest(r.Context()); err == nil && ok {
			reply.Oldest = &oldest
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(reply)
	})
}

// GetControlPlaneStatusHistory returns the recorded transitions.
func (g *Gateway) GetControlPlaneStatusHistory(ctx context.Context, req *jangarv1.GetControlPlaneStatusHistoryRequest) (*jangarv1.ControlPlaneStatusHistory, error) {
	if ns := req.GetNamespace(); ns != "" && ns != g.namespace {
		return nil, status.Errorf(codes.FailedPrecondition, "this gateway reports namespace %q, not %q", g.namespace, ns)
	}
	sinceText := ""
	if req.GetSince() != nil {
		sinceText = req.GetSince().AsDuration().String()
	}
	since, limit, err := parseHistoryParams(sinceText, int(req.GetLimit()))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := g.authorizeGRPC(ctx, access.VerbGet); err != nil {
		return nil, err
	}
	if g.history == nil {
		return nil, status.Error(codes.FailedPrecondition, noHistory)
	}
	items, truncated, err := g.history.Since(ctx, since, limit)
	if err != nil {
		if errors.Is(err, history.ErrUnavailable) {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &jangarv1.ControlPlaneStatusHistory{GeneratedAt: timestamppb.Now(), Retention: durationpb.New(g.history.Retention()), Truncated: truncated}
	if oldest, ok, err := g.history.Oldest(ctx); err == nil && ok {
		out.Oldest = timestamppb.New(oldest)
	}
	for _, t := range items {
		out.Transitions = append(out.Transitions, &jangarv1.ControlPlaneStatusTransition{Component: t.Component, Status: t.Status,
			PreviousStatus: t.Previous, Message: t.Message, At: timestamppb.New(t.At)})
	}
	return out, nil
}

// KeepsHistory reports whether the gateway keeps a status history.
func (g *Gateway) KeepsHistory() bool { return g.history != nil }
