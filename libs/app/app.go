// Package app runs an agentplane service: it sets up logging, tracing, metrics, the gRPC server
// with grpc.health.v1, lets the service register its own parts, serves until SIGTERM or SIGINT,
// then drains and stops everything within the shutdown timeout.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/metrics"
	"github.com/agentplane/agentplane/libs/telemetry"
)

// Version is set at build time with -ldflags "-X github.com/agentplane/agentplane/libs/app.Version=...".
var Version = "dev"

// streamGrace is how long open streams keep running after health turns NOT_SERVING.
const streamGrace = 250 * time.Millisecond

// Options configure Run.
type Options struct {
	Config config.Service
	// Setup registers the service's gRPC services, HTTP handlers and background tasks. It runs
	// before anything listens; an error stops the service before it serves.
	Setup func(ctx context.Context, rt *Runtime) error
	// GRPCServerOptions, when set, adds options to the gRPC server before Setup runs: transport
	// credentials and authentication interceptors (which may register metrics in reg).
	GRPCServerOptions func(cfg config.Service, reg prometheus.Registerer) ([]grpc.ServerOption, error)
	// Listening, when set, is told the bound addresses (tests bind port 0).
	Listening func(grpcAddr, metricsAddr net.Addr)
	// Signals that stop the service; defaults to SIGTERM and SIGINT.
	Signals []os.Signal
}

// Runtime is what a service gets to build itself from.
type Runtime struct {
	Config   config.Service
	Logger   *slog.Logger
	Registry *prometheus.Registry
	GRPC     *grpcx.Server
	// Mux serves on the metrics port beside /metrics, /healthz and /readyz.
	Mux *http.ServeMux

	tasks []task
}

type task struct {
	name string
	fn   func(ctx context.Context) error
}

// Go runs fn for the life of the service. fn must return when ctx is done; an error from it
// stops the service.
func (rt *Runtime) Go(name string, fn func(ctx context.Context) error) {
	rt.tasks = append(rt.tasks, task{name: name, fn: fn})
}

// SetServing sets the grpc.health.v1 status of one service name ("" is the whole server).
func (rt *Runtime) SetServing(service string, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	rt.GRPC.Health.SetServingStatus(service, st)
}

// Main is what a service's main function calls: it loads the common configuration, runs the
// service and exits non-zero with the error on failure.
func Main(name string, grpcPort, metricsPort int, setup func(ctx context.Context, rt *Runtime) error) {
	MainOptions(name, grpcPort, metricsPort, Options{Setup: setup})
}

// MainOptions is Main with more options; o.Config is loaded here. `<binary> probe ...` runs
// Probe instead of the service.
func MainOptions(name string, grpcPort, metricsPort int, o Options) {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(Probe(os.Args[2:], os.Stdout, os.Stderr))
	}
	cfg, err := config.LoadService(config.FromOS(), name, grpcPort, metricsPort)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o.Config = cfg
	if err := Run(context.Background(), o); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Run serves until ctx ends or a stop signal arrives, then shuts down gracefully.
func Run(ctx context.Context, o Options) error {
	cfg := o.Config
	log := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat).With("service", cfg.Name)
	slog.SetDefault(log)
	sigs := o.Signals
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGTERM, os.Interrupt}
	}
	ctx, stop := signal.NotifyContext(ctx, sigs...)
	defer stop()
	ctx = logging.IntoContext(ctx, log)

	shutdownTracing, err := telemetry.Setup(ctx, cfg.Name, Version)
	if err != nil {
		return err
	}
	rt, ms, err := newRuntime(ctx, o, log)
	if err != nil {
		return err
	}
	grpcL, metricsL, err := listen(ctx, cfg)
	if err != nil {
		return err
	}
	if o.Listening != nil {
		o.Listening(grpcL.Addr(), metricsL.Addr())
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tasks := newTaskGroup(len(rt.tasks)+2, cancel)
	tasks.start("grpc server", func() error { return rt.GRPC.Serve(grpcL) })
	tasks.start("metrics server", func() error { return ms.Serve(metricsL) })
	for _, t := range rt.tasks {
		tasks.start(t.name, func() error { return t.fn(runCtx) })
	}
	rt.SetServing("", true)
	ms.SetReady(true)
	log.Info("serving", "grpc", grpcL.Addr().String(), "metrics", metricsL.Addr().String(), "version", Version)

	<-runCtx.Done()
	log.Info("shutting down", "cause", context.Cause(runCtx))
	errs := shutdown(ctx, rt, ms, cancel, tasks)
	flushCtx, flushDone := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer flushDone()
	if err := shutdownTracing(flushCtx); err != nil {
		log.Warn("flush traces", "err", err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	log.Info("stopped")
	return nil
}

// newRuntime builds the service's Runtime (registry, gRPC server, HTTP mux), lets the service
// set itself up on it, and builds the metrics server.
func newRuntime(ctx context.Context, o Options, log *slog.Logger) (*Runtime, *metrics.Server, error) {
	cfg := o.Config
	reg := metrics.NewRegistry()
	metrics.RegisterBuildInfo(reg, cfg.Name, Version)
	var serverOpts []grpc.ServerOption
	if o.GRPCServerOptions != nil {
		var err error
		if serverOpts, err = o.GRPCServerOptions(cfg, reg); err != nil {
			return nil, nil, err
		}
	}
	rt := &Runtime{Config: cfg, Logger: log, Registry: reg, GRPC: grpcx.NewServer(reg, serverOpts...), Mux: http.NewServeMux()}
	rt.SetServing("", false)
	if o.Setup != nil {
		if err := o.Setup(ctx, rt); err != nil {
			return nil, nil, fmt.Errorf("setup: %w", err)
		}
	}
	rt.GRPC.InitMetrics()
	if cfg.Pprof {
		metrics.ServeProfiles(rt.Mux)
		log.Warn("serving Go profiles under /debug/pprof/ on the metrics port (JANGAR_DEBUG_PPROF=true): anyone who reaches the port can read them")
	}
	return rt, metrics.NewServer(reg, rt.Mux), nil
}

// listen opens the gRPC and metrics listeners.
func listen(ctx context.Context, cfg config.Service) (grpcL, metricsL net.Listener, err error) {
	var lc net.ListenConfig
	grpcL, err = lc.Listen(ctx, "tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for gRPC on %s: %w (set JANGAR_GRPC_HOST/JANGAR_GRPC_PORT to a free address)", cfg.GRPCAddr, err)
	}
	metricsL, err = lc.Listen(ctx, "tcp", cfg.MetricsAddr)
	if err != nil {
		_ = grpcL.Close()
		return nil, nil, fmt.Errorf("listen for metrics on %s: %w (set JANGAR_METRICS_ADDR to a free address)", cfg.MetricsAddr, err)
	}
	return grpcL, metricsL, nil
}

// taskGroup runs the servers and background tasks; the first to fail cancels the rest.
type taskGroup struct {
	wg     sync.WaitGroup
	errc   chan error
	cancel context.CancelCauseFunc
}

func newTaskGroup(n int, cancel context.CancelCauseFunc) *taskGroup {
	return &taskGroup{errc: make(chan error, n), cancel: cancel}
}

func (g *taskGroup) start(name string, fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.errc <- fmt.Errorf("%s: %w", name, err)
			g.cancel(err)
		}
	})
}

// shutdown drains the gRPC server (its watchers told NOT_SERVING first), stops the metrics
// server and waits for the tasks, all within the shutdown timeout; it returns what failed.
func shutdown(ctx context.Context, rt *Runtime, ms *metrics.Server, cancel context.CancelCauseFunc, tasks *taskGroup) []error {
	log := rt.Logger
	rt.GRPC.Health.Shutdown()
	ms.SetReady(false)

	shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), rt.Config.ShutdownTimeout)
	defer done()
	cancel(context.Canceled)
	stopped := make(chan struct{})
	go func() { rt.GRPC.GracefulStop(); close(stopped) }()
	// Watchers have been told NOT_SERVING; give them a moment to read it, then end the
	// long-lived streams so they do not hold the drain open until the timeout.
	select {
	case <-stopped:
	case <-time.After(streamGrace):
	}
	rt.GRPC.EndStreams()
	select {
	case <-stopped:
	case <-shutdownCtx.Done():
		log.Warn("graceful gRPC stop timed out; closing open streams")
		rt.GRPC.Stop()
	}
	var errs []error
	if err := ms.Shutdown(shutdownCtx); err != nil {
		errs = append(errs, fmt.Errorf("metrics server: %w", err))
	}
	waited := make(chan struct{})
	go func() { tasks.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-shutdownCtx.Done():
		errs = append(errs, errors.New("background tasks did not stop within the shutdown timeout"))
	}
	for drained := false; !drained; {
		select {
		case err := <-tasks.errc:
			if !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		default:
			drained = true
		}
	}
	return errs
}
