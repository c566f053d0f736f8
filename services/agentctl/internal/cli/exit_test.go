package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

// gateway is a scripted AgentctlService on a real gRPC server: the one-shot status returns
// items (or getErr); each watch call takes the next entry of watches: events to send, then an
// error to end with (nil: hold until the client leaves).
type gateway struct {
	jangarv1.UnimplementedAgentctlServiceServer
	items   []*jangarv1.ControlPlaneStatusItem
	getErr  error
	mu      sync.Mutex
	watches []watchScript
	calls   atomic.Int32
	// The status history: what GetControlPlaneStatusHistory answers, and the request it got.
	history    *jangarv1.ControlPlaneStatusHistory
	historyErr error
	historyReq *jangarv1.GetControlPlaneStatusHistoryRequest
}

func (g *gateway) GetControlPlaneStatusHistory(_ context.Context, req *jangarv1.GetControlPlaneStatusHistoryRequest) (*jangarv1.ControlPlaneStatusHistory, error) {
	g.mu.Lock()
	g.historyReq = req
	g.mu.Unlock()
	if g.historyErr != nil {
		return nil, g.historyErr
	}
	return g.history, nil
}

type watchScript struct {
	events []*jangarv1.ControlPlaneStatusEvent
	err    error
}

func (g *gateway) GetControlPlaneStatus(context.Context, *jangarv1.GetControlPlaneStatusRequest) (*jangarv1.ControlPlaneStatus, error) {
	if g.getErr != nil {
		return nil, g.getErr
	}
	return &jangarv1.ControlPlaneStatus{GeneratedAt: timestamppb.Now(), Items: g.items}, nil
}

func (g *gateway) WatchControlPlaneStatus(_ *jangarv1.WatchControlPlaneStatusRequest, s grpc.ServerStreamingServer[jangarv1.ControlPlaneStatusEvent]) error {
	n := int(g.calls.Add(1)) - 1
	g.mu.Lock()
	var w watchScript
	if n < len(g.watches) {
		w = g.watches[n]
	} else if len(g.watches) > 0 {
		w = g.watches[len(g.watches)-1]
	}
	g.mu.Unlock()
	for _, ev := range w.events {
		if err := s.Send(ev); err != nil {
			return err
		}
	}
	if w.err != nil {
		return w.err
	}
	<-s.Context().Done()
	return nil
}

func serveGateway(t *testing.T, g jangarv1.AgentctlServiceServer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	jangarv1.RegisterAgentctlServiceServer(s, g)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func item(component, st string) *jangarv1.ControlPlaneStatusItem {
	return &jangarv1.ControlPlaneStatusItem{Component: component, Namespace: "agents", Status: st}
}

func event(typ jangarv1.ControlPlaneStatusEvent_Type, cursor string, items ...*jangarv1.ControlPlaneStatusItem) *jangarv1.ControlPlaneStatusEvent {
	return &jangarv1.ControlPlaneStatusEvent{Type: typ, GeneratedAt: timestamppb.Now(), Cursor: cursor, Items: items}
}

func agentctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Execute(context.Background(), args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestErrorsThatRetryingCannotFixEndTheWatchAtOnce: each refusal ends the command within a
// second, with its exit code and a message saying what to do, long before --timeout.
func TestErrorsThatRetryingCannotFixEndTheWatchAtOnce(t *testing.T) {
	for _, c := range []struct {
		code     codes.Code
		exit     int
		says     string
		attempts int32
	}{
		{codes.Unauthenticated, ExitAccess, "--gateway-token", 1},
		{codes.PermissionDenied, ExitAccess, "PERMISSION_DENIED", 1},
		{codes.InvalidArgument, ExitRejected, "heartbeat must be", 1},
		{codes.FailedPrecondition, ExitRejected, "namespace elsewhere is not served", 1},
		{codes.Unimplemented, ExitRejected, "--fallback-poll", 1},
	} {
		t.Run(c.code.String(), func(t *testing.T) {
			msg := map[codes.Code]string{codes.InvalidArgument: "heartbeat must be between 1s and 5m", codes.FailedPrecondition: "namespace elsewhere is not served"}[c.code]
			g := &gateway{watches: []watchScript{{err: status.Error(c.code, msg+" ")}}}
			addr := serveGateway(t, g)
			// With --timeout 10m a refusal that were retried would hold the test: it must end
			// after the one call.
			code, _, stderr := agentctl(t, "status", "watch", "--gateway", addr, "--timeout", "10m", "--retry-backoff", "10ms")
			if code != c.exit || !strings.Contains(stderr, c.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", code, stderr, c.exit, c.says)
			}
			if got := g.calls.Load(); got != c.attempts {
				t.Fatalf("%d watch calls, want %d: a refusal that cannot change was retried", got, c.attempts)
			}
		})
	}
}

// TestTransientErrorsReconnectWithANoticeEachTime: UNAVAILABLE is retried with the last cursor,
// and each reconnect is a line on stderr without --debug.
func TestTransientErrorsReconnectWithANoticeEachTime(t *testing.T) {
	g := &gateway{watches: []watchScript{
		{events: []*jangarv1.ControlPlaneStatusEvent{event(jangarv1.ControlPlaneStatusEvent_SNAPSHOT, "c1", item("namespace", "healthy"))}, err: status.Error(codes.Unavailable, "gateway restarting")},
		{events: []*jangarv1.ControlPlaneStatusEvent{event(jangarv1.ControlPlaneStatusEvent_HEARTBEAT, "c1")}, err: status.Error(codes.Unavailable, "gateway restarting")},
		{events: []*jangarv1.ControlPlaneStatusEvent{event(jangarv1.ControlPlaneStatusEvent_DELTA, "c2", item("namespace", "degraded"))}},
	}}
	addr := serveGateway(t, g)
	code, stdout, stderr := agentctl(t, "status", "watch", "--gateway", addr, "--timeout", "2s", "--retry-backoff", "10ms", "-o", "ndjson")
	if code != ExitOK {
		t.Fatalf("exit %d (%s), want 0: the stream held until --timeout", code, stderr)
	}
	if n := strings.Count(stderr, "reconnecting in"); n != 2 {
		t.Fatalf("%d reconnect notices, want 2:\n%s", n, stderr)
	}
	if !strings.Contains(stdout, `"type":"snapshot"`) || !strings.Contains(stdout, `"status":"degraded"`) {
		t.Fatalf("stdout:\n%s", stdout)
	}
}

// TestFallbackPollWhenTheGatewayDoesNotStream: --fallback-poll replaces an unimplemented watch by
// polling the one-shot status, with a notice.
func TestFallbackPollWhenTheGatewayDoesNotStream(t *testing.T) {
	g := &gateway{items: []*jangarv1.ControlPlaneStatusItem{item("namespace", "healthy")},
		watches: []watchScript{{err: status.Error(codes.Unimplemented, "unknown method")}}}
	addr := serveGateway(t, g)
	code, stdout, stderr := agentctl(t, "status", "watch", "--gateway", addr, "--timeout", "1500ms", "--fallback-poll", "--heartbeat", "1s", "-o", "ndjson")
	if code != ExitOK || !strings.Contains(stderr, "polling") || !strings.Contains(stdout, `"type":"snapshot"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want a polled snapshot", code, stdout, stderr)
	}
}

// TestStatusExitCodeGatesScripts: 0 when healthy (unknown is fine), 3 when a component is
// degraded or in error, 0 again with --exit-code=false; refused credentials are 4.
func TestStatusExitCodeGatesScripts(t *testing.T) {
	healthy := serveGateway(t, &gateway{items: []*jangarv1.ControlPlaneStatusItem{item("namespace", "healthy"), item("runtime:temporal", "unknown")}})
	if code, out, errOut := agentctl(t, "status", "--gateway", healthy); code != ExitOK || !strings.Contains(out, "runtime:temporal") {
		t.Fatalf("healthy: exit %d\n%s%s", code, out, errOut)
	}
	for _, st := range []string{"degraded", "error"} {
		addr := serveGateway(t, &gateway{items: []*jangarv1.ControlPlaneStatusItem{item("namespace", "healthy"), item("status-writer", st)}})
		if code, out, errOut := agentctl(t, "status", "--gateway", addr); code != ExitUnhealthy || !strings.Contains(errOut, "status-writer="+st) || !strings.Contains(out, "status-writer") {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want 3 naming the component", st, code, out, errOut)
		}
		if code, _, _ := agentctl(t, "status", "--gateway", addr, "--exit-code=false"); code != ExitOK {
			t.Fatalf("%s with --exit-code=false: exit %d", st, code)
		}
	}
	refused := serveGateway(t, &gateway{getErr: status.Error(codes.Unauthenticated, "a bearer token is required")})
	if code, _, errOut := agentctl(t, "status", "--gateway", refused); code != ExitAccess || !strings.Contains(errOut, "UNAUTHENTICATED") {
		t.Fatalf("refused: exit %d, %q", code, errOut)
	}
}

// TestStatusWaitForHealthy: it returns 0 as soon as the last unhealthy component recovers, and
// 3 naming what is still unhealthy when --timeout passes first.
func TestStatusWaitForHealthy(t *testing.T) {
	recovers := serveGateway(t, &gateway{watches: []watchScript{{events: []*jangarv1.ControlPlaneStatusEvent{
		event(jangarv1.ControlPlaneStatusEvent_SNAPSHOT, "c1", item("namespace", "healthy"), item("status-writer", "error")),
		event(jangarv1.ControlPlaneStatusEvent_DELTA, "c2", item("status-writer", "healthy")),
	}}}})
	// The stream stays open after the recovery; with --timeout 10m, only returning when the
	// control plane turned healthy lets this test go on.
	if code, out, errOut := agentctl(t, "status", "wait", "--for", "healthy", "--timeout", "10m", "--gateway", recovers); code != ExitOK || !strings.Contains(out, "status-writer") {
		t.Fatalf("recovering: exit %d\n%s%s", code, out, errOut)
	}
	stuck := serveGateway(t, &gateway{watches: []watchScript{{events: []*jangarv1.ControlPlaneStatusEvent{
		event(jangarv1.ControlPlaneStatusEvent_SNAPSHOT, "c1", item("namespace", "healthy"), item("event-emitter", "degraded")),
	}}}})
	if code, _, errOut := agentctl(t, "status", "wait", "--for", "healthy", "--timeout", "1s", "--gateway", stuck); code != ExitUnhealthy || !strings.Contains(errOut, "event-emitter=degraded") {
		t.Fatalf("stuck: exit %d, %q; want 3 naming event-emitter", code, errOut)
	}
	for _, bad := range [][]string{{"--for", "sick", "--timeout", "1s"}, {"--for", "healthy"}} {
		if code, _, _ := agentctl(t, append([]string{"status", "wait", "--gateway", stuck}, bad...)...); code != ExitUsage {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}
}

// TestTheGatewayAliasesAreGone: --token-file, which was only ever the gateway's, is no flag now
// (--server and --token are kubectl's: TestServerAndTokenAreTheAPIServersOnEveryCommand).
func TestTheGatewayAliasesAreGone(t *testing.T) {
	addr := serveGateway(t, &gateway{items: []*jangarv1.ControlPlaneStatusItem{item("namespace", "healthy")}})
	if code, _, errOut := agentctl(t, "status", "--gateway", addr, "--token-file", "x"); code != ExitUsage || !strings.Contains(errOut, "unknown flag: --token-file") {
		t.Fatalf("exit %d, stderr %q; want 2, unknown flag", code, errOut)
	}
}

// TestTheKubeconfigTokenNeverGoesToTheGateway (#31 item 3): what agentctl presents to
// watch-gateway comes from its --gateway-token* flags or AGENTCTL_TOKEN only; a kubeconfig with
// a bearer token changes nothing.
func TestTheKubeconfigTokenNeverGoesToTheGateway(t *testing.T) {
	for _, c := range []struct {
		flag, env, want string
	}{
		{"", "", ""},
		{"", "from-env", "from-env"},
		{"from-flag", "from-env", "from-flag"},
	} {
		o := &statusOptions{access: grpcAccess{token: c.flag}}
		if got := o.gatewayAccess(c.env).token; got != c.want {
			t.Errorf("flag %q env %q: %q, want %q", c.flag, c.env, got, c.want)
		}
	}
}
