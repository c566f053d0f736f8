// Package service wires watch-gateway into the common service runner.
package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/redisx"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/gateway"
)

// Config is watch-gateway's own configuration.
type Config struct {
	HTTPAddr        string
	Namespace       string
	Heartbeat       time.Duration
	Debounce        time.Duration
	Window          int
	MaxStreams      int
	Targets         map[string]string
	Redis           redisx.Config
	TemporalAddress string
	// Access control of the streams (package access).
	AuthMode      access.Mode
	AuthAudiences []string
	AuthRecheck   time.Duration
	TLS           access.TLSFiles
}

// LoadConfig reads JANGAR_HTTP_ADDR and JANGAR_WATCH_*.
func LoadConfig(env *config.Env, svc config.Service) (Config, error) {
	c := Config{
		HTTPAddr:        env.String("JANGAR_HTTP_ADDR", "127.0.0.1:18101"),
		Heartbeat:       env.Duration("JANGAR_WATCH_HEARTBEAT", 30*time.Second),
		Debounce:        env.Duration("JANGAR_WATCH_DEBOUNCE", 500*time.Millisecond),
		Window:          env.Int("JANGAR_WATCH_WINDOW", 1024),
		MaxStreams:      env.Int("JANGAR_WATCH_MAX_STREAMS", 20000),
		Redis:           redisx.LoadConfig(env, ""),
		TemporalAddress: env.String("JANGAR_TEMPORAL_ADDRESS", ""),
		Targets:         map[string]string{},
		AuthAudiences:   env.List("JANGAR_WATCH_AUTH_AUDIENCES", nil),
		AuthRecheck:     env.Duration("JANGAR_WATCH_AUTH_RECHECK", time.Minute),
		TLS: access.TLSFiles{
			CertFile:     env.String("JANGAR_WATCH_TLS_CERT_FILE", ""),
			KeyFile:      env.String("JANGAR_WATCH_TLS_KEY_FILE", ""),
			ClientCAFile: env.String("JANGAR_WATCH_TLS_CLIENT_CA_FILE", ""),
		},
	}
	mode, err := access.ParseMode(env.String("JANGAR_WATCH_AUTH_MODE", "none"))
	if err != nil {
		return c, err
	}
	c.AuthMode = mode
	c.Namespace = svc.PodNamespace
	if len(svc.Namespaces) > 0 {
		c.Namespace = svc.Namespaces[0]
	}
	for _, t := range env.List("JANGAR_WATCH_TARGETS", nil) {
		name, addr, ok := strings.Cut(t, "=")
		if !ok || name == "" || addr == "" {
			return c, fmt.Errorf("JANGAR_WATCH_TARGETS item %q must be name=host:port", t)
		}
		c.Targets[name] = addr
	}
	if err := env.Err(); err != nil {
		return c, err
	}
	if _, err := c.Redis.Mode(); err != nil {
		return c, err
	}
	if c.Window < 1 || c.MaxStreams < 1 {
		return c, errors.New("JANGAR_WATCH_WINDOW and JANGAR_WATCH_MAX_STREAMS must be at least 1")
	}
	if c.Heartbeat < time.Second || c.Heartbeat > 5*time.Minute {
		return c, fmt.Errorf("JANGAR_WATCH_HEARTBEAT %s must be between 1s and 5m", c.Heartbeat)
	}
	if err := access.ListenCheck(c.AuthMode, "JANGAR_HTTP_ADDR", c.HTTPAddr); err != nil {
		return c, err
	}
	if err := access.ListenCheck(c.AuthMode, "JANGAR_GRPC_HOST:JANGAR_GRPC_PORT", svc.GRPCAddr); err != nil {
		return c, err
	}
	return c, nil
}

// GRPCServerOptions gives the gRPC server the gateway's TLS (mtls, or token with a certificate).
func GRPCServerOptions(svc config.Service, _ prometheus.Registerer) ([]grpc.ServerOption, error) {
	c, err := LoadConfig(config.FromOS(), svc)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := access.ServerConfig(c.AuthMode, c.TLS)
	if err != nil || tlsCfg == nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, nil
}

// Setup registers the AgentctlService, the SSE endpoint and the collector.
func Setup(ctx context.Context, rt *app.Runtime) error {
	c, err := LoadConfig(config.FromOS(), rt.Config)
	if err != nil {
		return err
	}
	clients, err := kube.NewClients(rt.Config)
	if err != nil {
		return err
	}
	kc, dyn := clients.Kube, clients.Dynamic
	rdb, err := redisx.New(c.Redis, redisx.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	hub := health.NewHub(c.Window, 64)
	opts := health.CollectorOptions{
		Namespace: c.Namespace, Targets: c.Targets, Debounce: c.Debounce, RedisAddress: c.Redis.Describe(),
		TemporalAddress: c.TemporalAddress, GRPCAddress: rt.Config.GRPCAddr, Self: rt.Config.Name,
	}
	opts.Redis = rdb // nil when Redis is not configured
	collector := health.NewCollector(kc, dyn, hub, opts)
	m := gateway.NewMetrics(rt.Registry)
	gw := gateway.NewGateway(hub, c.Namespace, c.Heartbeat, c.MaxStreams, m)
	if c.AuthMode == access.Token {
		gw.RequireToken(access.NewReviewer(kc, c.Namespace, access.ReviewerOptions{
			Audiences: c.AuthAudiences, OnReview: func(kind string) { m.Reviews.WithLabelValues(kind).Inc() },
		}), c.AuthRecheck)
	}
	tlsCfg, err := access.ServerConfig(c.AuthMode, c.TLS)
	if err != nil {
		return err
	}
	if c.AuthMode == access.Token && tlsCfg == nil {
		rt.Logger.Warn("bearer tokens travel in cleartext: set JANGAR_WATCH_TLS_CERT_FILE and JANGAR_WATCH_TLS_KEY_FILE")
	}
	jangarv1.RegisterAgentctlServiceServer(rt.GRPC, gw)
	rt.SetServing(jangarv1.AgentctlService_ServiceDesc.ServiceName, true)
	rt.Go("health collector", collector.Run)

	mux := http.NewServeMux()
	// A span per stream request covers its admission: parameters, access, the first events (a
	// watch over HTTP/1.1 then leaves the handler; its deltas are counted in metrics, not spans).
	mux.Handle("GET "+gateway.StreamPath, otelhttp.NewHandler(gw, "GET "+gateway.StreamPath))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w (set JANGAR_HTTP_ADDR to a free address)", c.HTTPAddr, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		l, scheme = tls.NewListener(l, tlsCfg), "https"
	}
	rt.Go("sse server", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			gw.CloseStreams() // SSE watches taken over from the HTTP server
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if srv.Shutdown(sctx) != nil {
				_ = srv.Close() // open streams end here
			}
		}()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if rdb != nil {
		rt.Go("redis client", func(ctx context.Context) error { <-ctx.Done(); return rdb.Close() })
	}
	rt.Logger.Info("status stream", "sse", scheme+"://"+l.Addr().String()+gateway.StreamPath, "namespace", c.Namespace, "auth", string(c.AuthMode))
	return nil
}
