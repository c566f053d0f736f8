package grpcx

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// flaky fails its first calls with UNAVAILABLE, as a restarting peer does.
type flaky struct {
	healthpb.UnimplementedHealthServer
	failures int32
	calls    atomic.Int32
}

func (f *flaky) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if f.calls.Add(1) <= f.failures {
		return nil, status.Error(codes.Unavailable, "restarting")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func serve(t *testing.T, reg *prometheus.Registry, svc healthpb.HealthServer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newInstrumentedServer(reg)
	healthpb.RegisterHealthServer(s, svc)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func TestClientRetriesUnavailable(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &flaky{failures: 2}
	addr := serve(t, reg, f)
	conn, err := Dial(addr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, %v; want SERVING after retries", resp, err)
	}
	if got := f.calls.Load(); got != 3 {
		t.Fatalf("server saw %d calls, want 3 (two UNAVAILABLE, then success)", got)
	}
	// go-grpc-middleware's provider: its standard names and labels.
	const want = `grpc_server_handled_total{grpc_code="Unavailable",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 2`
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP grpc_server_handled_total Total number of RPCs completed on the server, regardless of success or failure.\n# TYPE grpc_server_handled_total counter\n"+want+"\n"+
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 1`+"\n"), "grpc_server_handled_total"); err != nil {
		t.Fatal(err)
	}
}

func TestClientStopsRetryingAfterItsBudget(t *testing.T) {
	f := &flaky{failures: 100}
	addr := serve(t, prometheus.NewRegistry(), f)
	conn, err := Dial(addr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want UNAVAILABLE after the retry budget", err)
	}
	if got := f.calls.Load(); got != 5 {
		t.Fatalf("server saw %d calls, want maxAttempts=5", got)
	}
}

// InitMetrics gives every registered method its series before any call: a dashboard's rate()
// reads 0, not "no data", on a fresh or restarted server.
func TestInitMetricsCreatesEachMethodsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewServer(reg)
	if n := testutil.CollectAndCount(reg, "grpc_server_handled_total"); n != 0 {
		t.Fatalf("%d handled series before InitMetrics", n)
	}
	s.InitMetrics()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if mf.GetName() == "grpc_server_handled_total" && labels["grpc_service"] == "grpc.health.v1.Health" && labels["grpc_method"] == "Check" && labels["grpc_code"] == "OK" {
				found = true
			}
		}
	}
	if !found {
		t.Error("no grpc_server_handled_total series for /grpc.health.v1.Health/Check after InitMetrics")
	}
	if n := testutil.CollectAndCount(reg, "grpc_server_handling_seconds"); n == 0 {
		t.Error("no latency series after InitMetrics")
	}
}

// TestServerMetricsAreTheProvidersStandardSeries: after a call, the registry holds exactly the
// series grpcx names (MetricStarted, ...), with the provider's labels.
func TestServerMetricsAreTheProvidersStandardSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewServer(reg)
	s.InitMetrics()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() == MetricHandled {
			var names []string
			for _, l := range mf.GetMetric()[0].GetLabel() {
				names = append(names, l.GetName())
			}
			if strings.Join(names, ",") != "grpc_code,grpc_method,grpc_service,grpc_type" {
				t.Errorf("%s labels %v, want grpc_code, grpc_method, grpc_service, grpc_type", MetricHandled, names)
			}
		}
	}
	for _, name := range []string{MetricStarted, MetricHandled, MetricMsgReceived, MetricMsgSent, MetricHandlingTime} {
		if !got[name] {
			t.Errorf("no %s series after InitMetrics (have %v)", name, got)
		}
	}
}
