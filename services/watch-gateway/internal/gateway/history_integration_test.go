//go:build integration

package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/health"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/history"
)

// The status history over HTTP and gRPC: two gateways (replicas) follow hubs that see the same
// changes and record into one Redis; each serves the same timeline, to callers allowed to get
// the status, and says clearly when it keeps none or its Redis is away.
func TestBothReplicasServeOneHistory(t *testing.T) {
	kc := kubernetes.NewForConfigOrDie(env.Config)
	viewer := serviceAccountToken(t, kc, "history-viewer")
	stranger := serviceAccountToken(t, kc, "history-stranger")
	grantStatus(t, kc, "history-viewer")
	rdb := redis.NewClient(&redis.Options{Addr: rds.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type replica struct {
		hub    *health.Hub
		gw     *Gateway
		url    string
		client jangarv1.AgentctlServiceClient
		done   chan struct{}
	}
	start := func(withHistory bool) replica {
		hub := health.NewHub(64, 64)
		gw := NewGateway(hub, "default", 30*time.Second, 100, nil)
		gw.RequireToken(access.NewReviewer(kc, "default", access.ReviewerOptions{}), time.Minute)
		r := replica{hub: hub, gw: gw, done: make(chan struct{})}
		if withHistory {
			store := history.New(rdb, "history-test", history.Options{}) // its own keys in the shared Redis
			gw.KeepHistory(store)
			go func() { defer close(r.done); _ = store.Follow(ctx, hub) }()
		} else {
			close(r.done)
		}
		mux := http.NewServeMux()
		mux.Handle("GET "+HistoryPath, gw.HistoryHandler())
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		r.url = srv.URL + HistoryPath
		r.client = serveGRPC(t, gw)
		return r
	}
	a, b := start(true), start(true)
	for _, r := range []replica{a, b} { // each replica follows its hub before the first change
		for deadline := time.Now().Add(30 * time.Second); r.hub.Subscribers() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the history never followed the hub")
			}
		}
	}
	for _, st := range []health.Status{health.Healthy, health.Degraded, health.Healthy} {
		for _, r := range []replica{a, b} {
			r.hub.Update([]health.Item{{Component: "event-emitter", Status: st, Message: "event-emitter is " + string(st)}})
		}
	}
	read := func(r replica, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, r.url+"?since=1h", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	type reply struct {
		Transitions []history.Transition `json:"transitions"`
	}
	var got [2]reply
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for i, r := range []replica{a, b} {
			code, body := read(r, viewer)
			if code != http.StatusOK {
				t.Fatalf("replica %d: %d %s", i, code, body)
			}
			if err := json.Unmarshal([]byte(body), &got[i]); err != nil {
				t.Fatal(err)
			}
		}
		if len(got[0].Transitions) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history holds %+v", got[0].Transitions)
		}
	}
	want := "healthy>degraded>healthy"
	for i, g := range got {
		var s []string
		for _, tr := range g.Transitions {
			s = append(s, tr.Status)
		}
		if strings.Join(s, ">") != want {
			t.Fatalf("replica %d serves %v, want %s once", i, s, want)
		}
	}
	if code, body := read(a, stranger); code != http.StatusForbidden {
		t.Fatalf("a caller without the status grant: %d %s", code, body)
	}
	if code, _ := read(a, ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, a.url+"?since=yesterday", nil)
	req.Header.Set("Authorization", "Bearer "+viewer)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad since: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// gRPC: the same transitions, the previous status named.
	with := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+viewer)
	h, err := b.client.GetControlPlaneStatusHistory(with, &jangarv1.GetControlPlaneStatusHistoryRequest{Since: durationpb.New(time.Hour)})
	if err != nil || len(h.GetTransitions()) != 3 || h.GetTransitions()[1].GetPreviousStatus() != "healthy" || h.GetTransitions()[1].GetStatus() != "degraded" ||
		h.GetRetention().AsDuration() != 24*time.Hour {
		t.Fatalf("gRPC history: %v %v", h, err)
	}
	if _, err := b.client.GetControlPlaneStatusHistory(ctx, &jangarv1.GetControlPlaneStatusHistoryRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC without a token: %v", err)
	}
	if _, err := b.client.GetControlPlaneStatusHistory(with, &jangarv1.GetControlPlaneStatusHistoryRequest{Limit: 20000}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("gRPC with limit 20000: %v", err)
	}

	// A gateway without Redis keeps none and says so.
	none := start(false)
	if code, body := read(none, viewer); code != http.StatusNotFound || !strings.Contains(body, "needs Redis") {
		t.Fatalf("a gateway without history: %d %s", code, body)
	}
	if _, err := none.client.GetControlPlaneStatusHistory(with, &jangarv1.GetControlPlaneStatusHistoryRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("gRPC on a gateway without history: %v", err)
	}
	cancel()
	<-a.done
	<-b.done
}
