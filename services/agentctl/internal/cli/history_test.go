package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

func transition(at time.Time, component, prev, st, msg string) *jangarv1.ControlPlaneStatusTransition {
	return &jangarv1.ControlPlaneStatusTransition{At: timestamppb.New(at), Component: component, PreviousStatus: prev, Status: st, Message: msg}
}

// agentctl status history asks the gateway for the window and limit given and prints the
// transitions oldest first, as a table or JSON.
func TestStatusHistoryPrintsTheGatewaysTransitions(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	g := &gateway{history: &jangarv1.ControlPlaneStatusHistory{GeneratedAt: timestamppb.New(at.Add(time.Hour)), Retention: durationpb.New(24 * time.Hour),
		Transitions: []*jangarv1.ControlPlaneStatusTransition{
			transition(at, "event-emitter", "", "healthy", "SERVING"),
			transition(at.Add(time.Minute), "event-emitter", "healthy", "degraded", "redis unreachable"),
		}}}
	addr := serveGateway(t, g)
	code, out, errOut := agentctl(t, "status", "history", "--since", "2h", "--limit", "50", "--gateway", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME ") ||
		strings.Join(strings.Fields(lines[2]), " ") != "2026-11-27T10:01:00Z event-emitter healthy degraded redis unreachable" ||
		strings.Join(strings.Fields(lines[1]), " ") != "2026-11-27T10:00:00Z event-emitter - healthy SERVING" {
		t.Fatalf("table:\n%s", out)
	}
	if g.historyReq.GetSince().AsDuration() != 2*time.Hour || g.historyReq.GetLimit() != 50 {
		t.Fatalf("the gateway was asked %v", g.historyReq)
	}
	code, out, _ = agentctl(t, "status", "history", "--gateway", addr, "-o", "json")
	var h historyJSON
	if code != 0 || json.Unmarshal([]byte(out), &h) != nil || len(h.Transitions) != 2 || h.Retention != "24h0m0s" || h.Transitions[1].Previous != "healthy" || h.Since != "1h0m0s" {
		t.Fatalf("json (exit %d):\n%s", code, out)
	}
}

// Refusals and outages end with their exit codes and say what to do.
func TestStatusHistoryErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		exit int
		says string
	}{
		{status.Error(codes.FailedPrecondition, "this gateway keeps no status history: it needs Redis"), ExitRejected, "needs Redis"},
		{status.Error(codes.Unauthenticated, "a bearer token is required"), ExitAccess, "--gateway-token"},
		{status.Error(codes.Unavailable, "Redis cannot be reached"), ExitUnavailable, "Redis cannot be reached"},
	} {
		addr := serveGateway(t, &gateway{historyErr: c.err})
		code, _, errOut := agentctl(t, "status", "history", "--gateway", addr)
		if code != c.exit || !strings.Contains(errOut, c.says) {
			t.Fatalf("%v: exit %d, stderr %q; want %d saying %q", c.err, code, errOut, c.exit, c.says)
		}
	}
	for _, args := range [][]string{{"--since", "-1h"}, {"--limit", "0"}, {"--limit", "20000"}, {"-o", "ndjson"}} {
		code, _, errOut := agentctl(t, append([]string{"status", "history", "--gateway", "127.0.0.1:1"}, args...)...)
		if code != ExitUsage {
			t.Fatalf("%v: exit %d (%s), want %d", args, code, errOut, ExitUsage)
		}
	}
}
