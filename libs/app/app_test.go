package app

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentplane/agentplane/libs/config"
)

func testConfig(t *testing.T, shutdownTimeout string) config.Service {
	t.Helper()
	cfg, err := config.LoadService(config.FromMap(map[string]string{"JANGAR_GRPC_PORT": "0", "JANGAR_METRICS_ADDR": "127.0.0.1:0", "JANGAR_SHUTDOWN_TIMEOUT": shutdownTimeout}), "test-service", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestRunServesHealthAndMetricsAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan [2]net.Addr, 1)
	taskStopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			// Far longer than the test waits: a stream left open would hold shutdown until then.
			Config: testConfig(t, "10m"),
			Setup: func(ctx context.Context, rt *Runtime) error {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_setup_total", Help: "x"})
				rt.Registry.MustRegister(c)
				c.Inc()
				rt.Go("waiter", func(ctx context.Context) error {
					<-ctx.Done()
					close(taskStopped)
					return nil
				})
				return nil
			},
			Listening: func(g, m net.Addr) { addrs <- [2]net.Addr{g, m} },
		})
	}()
	var a [2]net.Addr
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}

	conn, err := grpc.NewClient(a[0].String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	// The watch has its own context: it must be ended by the server's shutdown, not by the test.
	watch, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never SERVING, last %v", resp.Status)
		}
	}

	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, %v", r, err)
	}
	resp, err := http.Get("http://" + a[1].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"test_setup_total 1", "go_goroutines", "grpc_server_handled_total", `agentplane_build_info{goversion="` + runtime.Version() + `",service="test-service",version="dev"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		r, err := http.Get("http://" + a[1].String() + path)
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", path, r, err)
		}
		r.Body.Close()
	}

	// An open health watch must not hold up shutdown: Run returns without waiting out its
	// 10-minute timeout.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of cancel with a health watch open: streams are not ended")
	}
	for { // the watch was ended by the server, not left open
		if _, err := watch.Recv(); err != nil {
			break
		}
	}
	select {
	case <-taskStopped:
	default:
		t.Fatal("background task was not stopped")
	}
	if _, err := net.DialTimeout("tcp", a[0].String(), time.Second); err == nil {
		t.Error("gRPC port still accepting after Run returned")
	}
}

func TestRunStopsWhenATaskFails(t *testing.T) {
	boom := errors.New("boom")
	err := Run(context.Background(), Options{
		Config: testConfig(t, "5s"),
		Setup: func(ctx context.Context, rt *Runtime) error {
			rt.Go("failing", func(ctx context.Context) error { return boom })
			return nil
		},
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
}

func TestRunReportsATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig(t, "5s")
	cfg.GRPCAddr = l.Addr().String()
	err = Run(context.Background(), Options{Config: cfg})
	if err == nil || !strings.Contains(err.Error(), "JANGAR_GRPC_PORT") {
		t.Fatalf("Run = %v, want an error naming the setting to change", err)
	}
}

// TestProfilesOnlyWhenAsked: /debug/pprof/ answers on the metrics port with JANGAR_DEBUG_PPROF=true
// and is not there without it.
func TestProfilesOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		env := map[string]string{"JANGAR_GRPC_PORT": "0", "JANGAR_METRICS_ADDR": "127.0.0.1:0"}
		if on {
			env["JANGAR_DEBUG_PPROF"] = "true"
		}
		cfg, err := config.LoadService(config.FromMap(env), "test-service", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		addrs := make(chan net.Addr, 1)
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{Config: cfg, Listening: func(_, m net.Addr) { addrs <- m }})
		}()
		var m net.Addr
		select {
		case m = <-addrs:
		case err := <-done:
			cancel()
			t.Fatalf("Run returned early: %v", err)
		}
		resp, err := http.Get("http://" + m.String() + "/debug/pprof/cmdline")
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("JANGAR_DEBUG_PPROF=%v: /debug/pprof/cmdline answered %d, want %d", on, resp.StatusCode, want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
