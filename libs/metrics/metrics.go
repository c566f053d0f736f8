// Package metrics serves Prometheus metrics and the liveness and readiness endpoints every
// service exposes on its metrics port.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof" //nolint:gosec // G108: the handlers go on the service's own mux (ServeProfiles), only with JANGAR_DEBUG_PPROF=true
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go runtime and process collectors registered.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// RegisterBuildInfo registers agentplane_build_info{service, version, goversion}, always 1: which
// build of which service a target runs (join it on job/instance to label other series).
func RegisterBuildInfo(reg prometheus.Registerer, service, version string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "agentplane_build_info",
		Help:        "The build a service runs: its name, version (the commit it was built from) and Go version; always 1.",
		ConstLabels: prometheus.Labels{"service": service, "version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	srv   *http.Server
	ready atomic.Bool
}

// NewServer builds the server; extra handlers (for example watch-gateway's SSE endpoint) can be
// added to mux before Serve.
func NewServer(reg *prometheus.Registry, mux *http.ServeMux) *Server {
	s := &Server{}
	if mux == nil {
		mux = http.NewServeMux()
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return s
}

// ServeProfiles adds Go's profiles (net/http/pprof: CPU, heap, goroutines, ...) under
// /debug/pprof/ to mux.
func ServeProfiles(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// SetReady flips /readyz.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Serve serves on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting requests and waits for open ones until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
