// Package wiring wires watch-gateway into the common service runner.
package wiring

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
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/redisx"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/console"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/gateway"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/history"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/runs"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/session"
)

// Config is watch-gateway's own configuration.
type Config struct {
	HTTPAddr string
	// AllowedHosts are the host names HTTP requests may name (JANGAR_HTTP_ALLOWED_HOSTS; IP
	// addresses always may): localhost, and in a cluster the Service's names.
	AllowedHosts []string
	// Namespace is the control plane's own (the pod's): its Deployments and Pods are reported on,
	// and the status-viewer check, the history and the session cookie belong to it.
	Namespace string
	// RunsNamespace is where the runs the console and the runs stream show live: the first of
	// JANGAR_AGENTS_CONTROLLER_NAMESPACES, else the control plane's own.
	RunsNamespace string
	Heartbeat     time.Duration
	Debounce      time.Duration
	Window        int
	MaxStreams    int
	// Bounds per user and per client address (loopback not counted); 0 turns one off.
	MaxStreamsUser  int
	MaxStreamsAddr  int
	Targets         map[string]string
	Redis           redisx.Config
	TemporalAddress string
	// Access control of the streams (package access).
	AuthMode      access.Mode
	AuthAudiences []string
	AuthRecheck   time.Duration
	TLS           access.TLSFiles
	// The web console and the runs stream (package console).
	Console        bool
	ConsoleCancel  bool
	SessionKeyFile string
	SessionTTL     time.Duration
	RunsBatch      time.Duration
	// The status history in Redis (package history).
	HistoryRetention  time.Duration
	HistoryMaxEntries int
	// Archive is the run archive job-gc writes (JANGAR_ARCHIVE_URL, ...); the gateway reads it
	// when it is set.
	Archive archive.Config
	// APIServiceAddr, when set, serves the aggregated API (gateway.APIGroup) there, over the
	// gateway's TLS, to the Kubernetes API server only (its front-proxy client certificate).
	APIServiceAddr string
}

// LoadConfig reads JANGAR_HTTP_ADDR and JANGAR_WATCH_*.
func LoadConfig(env *config.Env, svc config.Service) (Config, error) {
	c := Config{
		HTTPAddr:        env.String("JANGAR_HTTP_ADDR", "127.0.0.1:18101"),
		AllowedHosts:    env.List("JANGAR_HTTP_ALLOWED_HOSTS", []string{"localhost"}),
		Heartbeat:       env.Duration("JANGAR_WATCH_HEARTBEAT", 30*time.Second),
		Debounce:        env.Duration("JANGAR_WATCH_DEBOUNCE", 500*time.Millisecond),
		Window:          env.Int("JANGAR_WATCH_WINDOW", 1024),
		MaxStreams:      env.Int("JANGAR_WATCH_MAX_STREAMS", 20000),
		MaxStreamsUser:  env.Int("JANGAR_WATCH_MAX_STREAMS_PER_USER", 100),
		MaxStreamsAddr:  env.Int("JANGAR_WATCH_MAX_STREAMS_PER_ADDRESS", 200),
		Redis:           redisx.LoadConfig(env, ""),
		TemporalAddress: env.String("JANGAR_TEMPORAL_ADDRESS", ""),
		Targets:         map[string]string{},
		AuthAudiences:   env.List("JANGAR_WATCH_AUTH_AUDIENCES", []string{access.GatewayAudience}),
		AuthRecheck:     env.Duration("JANGAR_WATCH_AUTH_RECHECK", time.Minute),
		TLS: access.TLSFiles{
			CertFile:     env.String("JANGAR_WATCH_TLS_CERT_FILE", ""),
			KeyFile:      env.String("JANGAR_WATCH_TLS_KEY_FILE", ""),
			ClientCAFile: env.String("JANGAR_WATCH_TLS_CLIENT_CA_FILE", ""),
		},
		Console:           env.Bool("JANGAR_CONSOLE_ENABLED", true),
		ConsoleCancel:     env.Bool("JANGAR_CONSOLE_CANCEL_ENABLED", true),
		SessionKeyFile:    env.String("JANGAR_CONSOLE_SESSION_KEY_FILE", ""),
		SessionTTL:        env.Duration("JANGAR_CONSOLE_SESSION_TTL", 8*time.Hour),
		RunsBatch:         env.Duration("JANGAR_WATCH_RUNS_BATCH", 100*time.Millisecond),
		HistoryRetention:  env.Duration("JANGAR_WATCH_HISTORY_RETENTION", 24*time.Hour),
		HistoryMaxEntries: env.Int("JANGAR_WATCH_HISTORY_MAX_ENTRIES", 50000),
		APIServiceAddr:    env.String("JANGAR_APISERVICE_ADDR", ""),
		Archive:           archive.LoadConfig(env),
	}
	mode, err := access.ParseMode(env.String("JANGAR_WATCH_AUTH_MODE", "none"))
	if err != nil {
		return c, err
	}
	c.AuthMode = mode
	if mode == access.Token && len(c.AuthAudiences) == 0 {
		return c, fmt.Errorf("JANGAR_WATCH_AUTH_AUDIENCES is empty: token mode needs an audience of its own (default %s), "+
			"or tokens made for the API server (which every kubeconfig carries) would be accepted here", access.GatewayAudience)
	}
	c.Namespace, c.RunsNamespace = svc.PodNamespace, svc.PodNamespace
	if len(svc.Namespaces) > 0 {
		c.RunsNamespace = svc.Namespaces[0]
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
	if c.MaxStreamsUser < 0 || c.MaxStreamsAddr < 0 {
		return c, errors.New("JANGAR_WATCH_MAX_STREAMS_PER_USER and JANGAR_WATCH_MAX_STREAMS_PER_ADDRESS must be 0 (no bound) or more")
	}
	if c.Heartbeat < time.Second || c.Heartbeat > 5*time.Minute {
		return c, fmt.Errorf("JANGAR_WATCH_HEARTBEAT %s must be between 1s and 5m", c.Heartbeat)
	}
	if c.SessionTTL < time.Minute || c.SessionTTL > 7*24*time.Hour {
		return c, fmt.Errorf("JANGAR_CONSOLE_SESSION_TTL %s must be between 1m and 168h", c.SessionTTL)
	}
	if c.RunsBatch < 10*time.Millisecond || c.RunsBatch > 10*time.Second {
		return c, fmt.Errorf("JANGAR_WATCH_RUNS_BATCH %s must be between 10ms and 10s", c.RunsBatch)
	}
	if c.HistoryRetention < time.Minute || c.HistoryRetention > 90*24*time.Hour {
		return c, fmt.Errorf("JANGAR_WATCH_HISTORY_RETENTION %s must be between 1m and 2160h (90 days)", c.HistoryRetention)
	}
	if c.HistoryMaxEntries < 100 || c.HistoryMaxEntries > 10_000_000 {
		return c, fmt.Errorf("JANGAR_WATCH_HISTORY_MAX_ENTRIES %d must be between 100 and 10000000", c.HistoryMaxEntries)
	}
	if c.APIServiceAddr != "" && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
		return c, errors.New("JANGAR_APISERVICE_ADDR serves the aggregated API over TLS: set JANGAR_WATCH_TLS_CERT_FILE and JANGAR_WATCH_TLS_KEY_FILE " +
			"(a certificate for the Service's name, NAME.NAMESPACE.svc, signed by the APIService's caBundle), or unset it")
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
	clients, err := kubeclient.NewClients(rt.Config)
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
	gw.LimitPerCaller(c.MaxStreamsUser, c.MaxStreamsAddr)
	reviewOpts := access.ReviewerOptions{Audiences: c.AuthAudiences, OnReview: func(kind string) { m.Reviews.WithLabelValues(kind).Inc() }}
	var statusReviewer *access.Reviewer
	if c.AuthMode == access.Token {
		statusReviewer = access.NewReviewer(kc, c.Namespace, reviewOpts)
		gw.RequireToken(statusReviewer, c.AuthRecheck)
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
	setupHistory(rt, c, rdb, hub, gw, mux)
	setupArchive(rt, c, kc, gw, mux, reviewOpts)
	var runsAuth gateway.Authorizer // who may watch the runs: nil without the console
	if c.Console {
		if runsAuth, err = setupConsole(rt, c, clients, gw, mux, statusReviewer, reviewOpts, tlsCfg != nil); err != nil {
			return err
		}
	}
	// Bounded requests: their headers and bodies (a slow sender is cut off), idle keep-alive
	// connections. A stream clears its own read deadline once admitted (the responses run long).
	srv := &http.Server{Handler: newHostAllowList(c.AllowedHosts, mux), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w (set JANGAR_HTTP_ADDR to a free address)", c.HTTPAddr, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		l, scheme = tls.NewListener(l, tlsCfg), "https"
	}
	rt.Go("sse server", serve(srv, l, gw.CloseStreams)) // SSE watches taken over from the HTTP server
	if c.APIServiceAddr != "" {
		statusAuth := gateway.Authorizer(statusReviewer)
		if statusReviewer == nil { // the API server authenticates; the gateway still authorizes
			statusAuth = access.NewReviewer(kc, c.Namespace, reviewOpts)
		}
		if err := serveAggregated(ctx, rt, c, kc, &gateway.Aggregated{Gateway: gw, Status: statusAuth, Runs: runsAuth, RunsNamespace: c.RunsNamespace}); err != nil {
			return err
		}
	}
	if rdb != nil {
		rt.Go("redis client", func(ctx context.Context) error { <-ctx.Done(); return rdb.Close() })
	}
	rt.Logger.Info("status stream", "sse", scheme+"://"+l.Addr().String()+gateway.StreamPath, "namespace", c.Namespace, "runsNamespace", c.RunsNamespace, "auth", string(c.AuthMode))
	return nil
}

// serve runs srv on l until ctx ends, then stops it: first with closeFirst, then Shutdown, which
// waits up to 2 s for connections to go idle before the rest are closed.
func serve(srv *http.Server, l net.Listener, closeFirst func()) func(context.Context) error {
	return func(ctx context.Context) error {
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-ctx.Done()
			closeFirst()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if srv.Shutdown(sctx) != nil {
				_ = srv.Close() // open streams end here
			}
		}()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		// Serve returns as soon as Shutdown begins; the server is stopped once Shutdown has
		// returned.
		<-stopped
		return nil
	}
}

// serveAggregated serves the aggregated API on c.APIServiceAddr to the API server, whose
// front-proxy trust it reads from kube-system (and keeps current).
func serveAggregated(ctx context.Context, rt *app.Runtime, c Config, kc kubernetes.Interface, agg *gateway.Aggregated) error {
	cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
	if err != nil {
		return fmt.Errorf("JANGAR_APISERVICE_ADDR: load the TLS certificate %s and key %s: %w", c.TLS.CertFile, c.TLS.KeyFile, err)
	}
	proxy, err := access.NewFrontProxy(ctx, kc)
	if err != nil {
		return fmt.Errorf("JANGAR_APISERVICE_ADDR: %w", err)
	}
	agg.Users = proxy
	rt.Go("front-proxy trust", func(ctx context.Context) error {
		return proxy.Run(ctx, time.Minute, func(err error) { rt.Logger.Warn("front-proxy trust not refreshed; the last one stays", "err", err) })
	})
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", c.APIServiceAddr)
	if err != nil {
		return fmt.Errorf("listen for the aggregated API on %s: %w (set JANGAR_APISERVICE_ADDR to a free address)", c.APIServiceAddr, err)
	}
	base := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	srv := &http.Server{Handler: otelhttp.NewHandler(agg.Handler(), "aggregated API"), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	rt.Go("aggregated API server", serve(srv, tls.NewListener(l, proxy.TLSConfig(base)), func() {}))
	rt.Logger.Info("aggregated API", "addr", "https://"+l.Addr().String()+"/apis/"+gateway.APIGroup+"/"+gateway.APIVersion)
	return nil
}

// setupHistory keeps the status history in Redis, when there is one, and serves it.
func setupHistory(rt *app.Runtime, c Config, rdb redis.UniversalClient, hub *health.Hub, gw *gateway.Gateway, mux *http.ServeMux) {
	if rdb != nil {
		store := history.New(rdb, c.Namespace, history.Options{Retention: c.HistoryRetention, MaxEntries: int64(c.HistoryMaxEntries), Registerer: rt.Registry})
		gw.KeepHistory(store)
		rt.Go("status history", func(ctx context.Context) error { return store.Follow(ctx, hub) })
	}
	mux.Handle("GET "+gateway.HistoryPath, otelhttp.NewHandler(gw.HistoryHandler(), "GET "+gateway.HistoryPath))
}

// setupArchive serves the run archive's reads, over HTTP and gRPC (and the aggregated API), to
// callers allowed to read the same runs live, when JANGAR_ARCHIVE_URL names one.
func setupArchive(rt *app.Runtime, c Config, kc kubernetes.Interface, gw *gateway.Gateway, mux *http.ServeMux, reviewOpts access.ReviewerOptions) {
	if !c.Archive.Enabled() {
		return
	}
	ns := c.RunsNamespace
	acc := gateway.ArchiveAccess{
		Kinds: map[string]gateway.Authorizer{
			runs.KindAgentRun:         access.NewResourceReviewer(kc, ns, agentsv1alpha1.GroupVersion.Group, "agentruns", reviewOpts),
			runs.KindOrchestrationRun: access.NewResourceReviewer(kc, ns, orchv1alpha1.GroupVersion.Group, "orchestrationruns", reviewOpts),
		},
		Parts: map[string]gateway.Authorizer{
			gateway.ArchiveEvents: access.NewResourceReviewer(kc, ns, "", "events", reviewOpts),
			gateway.ArchiveJobs:   access.NewResourceReviewer(kc, ns, "batch", "jobs", reviewOpts),
			gateway.ArchiveLogs:   access.NewSubresourceReviewer(kc, ns, "", "pods", "log", reviewOpts),
		},
		Check: c.AuthMode == access.Token,
	}
	store := newLazyArchive(c.Archive, func(err error) { rt.Logger.Warn("the run archive cannot be read", "err", err) })
	gw.ServeArchive(store, ns, acc)
	rt.Go("run archive reader", func(ctx context.Context) error { <-ctx.Done(); store.Close(); return nil })
	h := otelhttp.NewHandler(gw.ArchiveHandler(), "GET "+gateway.ArchivePath)
	mux.Handle("GET "+gateway.ArchivePath, h)
	mux.Handle("GET "+gateway.ArchivePath+"/", h)
	rt.Logger.Info("run archive", "reads", gateway.ArchivePath, "namespace", ns)
}

// setupConsole serves the runs stream and the web console; it returns who may watch the runs.
func setupConsole(rt *app.Runtime, c Config, clients kubeclient.Clients, gw *gateway.Gateway, mux *http.ServeMux,
	statusReviewer *access.Reviewer, reviewOpts access.ReviewerOptions, overTLS bool) (gateway.Authorizer, error) {
	keys := session.Random(c.SessionTTL)
	if c.SessionKeyFile != "" {
		var err error
		keys, err = session.FromFile(c.SessionKeyFile, c.SessionTTL, func(err error) {
			if err != nil {
				rt.Logger.Warn("console session key: the changed file was not taken", "err", err)
				return
			}
			rt.Logger.Info("console session key rotated: sessions signed with the old key have ended")
		})
		if err != nil {
			return nil, fmt.Errorf("JANGAR_CONSOLE_SESSION_KEY_FILE: %w", err)
		}
	} else if c.AuthMode == access.Token {
		rt.Logger.Warn("console sessions are signed with a key drawn at start: they end with this process and other replicas refuse them; set JANGAR_CONSOLE_SESSION_KEY_FILE")
	}
	ours, err := versioned.NewForConfig(clients.Config)
	if err != nil {
		return nil, fmt.Errorf("agentplane clientset: %w", err)
	}
	runsHub := health.NewHub(c.Window, 256)
	src, err := runs.New(ours, c.RunsNamespace, runsHub, c.RunsBatch)
	if err != nil {
		return nil, err
	}
	rt.Go("runs stream", src.Run)
	kinds := map[string]gateway.Authorizer{
		runs.KindAgentRun:         access.NewResourceReviewer(clients.Kube, c.RunsNamespace, agentsv1alpha1.GroupVersion.Group, "agentruns", reviewOpts),
		runs.KindOrchestrationRun: access.NewResourceReviewer(clients.Kube, c.RunsNamespace, orchv1alpha1.GroupVersion.Group, "orchestrationruns", reviewOpts),
	}
	watchRuns := gateway.AllOf{kinds[runs.KindAgentRun], kinds[runs.KindOrchestrationRun]}
	var runsAuth gateway.Authorizer
	if c.AuthMode == access.Token {
		runsAuth = watchRuns
	}
	gw.ServeRuns(runsHub, runsAuth)
	// The cookie names the namespace (two gateways on one host keep their sessions apart) and,
	// over TLS, has the __Host- prefix.
	keys.Name(c.Namespace, overTLS)
	gw.AcceptSessions(keys)
	cancels := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_console_cancels_total",
		Help: "Cancels asked through the web console, by run kind and outcome (cancelled, refused, not_found, error)."}, []string{"kind", "outcome"})
	rt.Registry.MustRegister(cancels)
	reads := map[string]gateway.Authorizer{
		console.ReadEvents:         access.NewResourceReviewer(clients.Kube, c.RunsNamespace, "", "events", reviewOpts),
		console.ReadJobs:           access.NewResourceReviewer(clients.Kube, c.RunsNamespace, "batch", "jobs", reviewOpts),
		console.ReadOrchestrations: access.NewResourceReviewer(clients.Kube, c.RunsNamespace, orchv1alpha1.GroupVersion.Group, "orchestrations", reviewOpts),
	}
	con := &console.Console{Mode: c.AuthMode, Namespace: c.RunsNamespace, Sessions: keys, Kinds: kinds, Reads: reads, Runs: src,
		Kube: clients.Kube, Client: ours, HasHistory: gw.KeepsHistory(), HistoryKeep: c.HistoryRetention, HasArchive: gw.ServesArchive(),
		CancelDisabled: !c.ConsoleCancel, OnCancel: func(kind, outcome string) { cancels.WithLabelValues(kind, outcome).Inc() }}
	if statusReviewer != nil {
		con.Status = statusReviewer
	}
	mux.Handle("GET "+gateway.RunsStreamPath, otelhttp.NewHandler(gw.RunsHandler(), "GET "+gateway.RunsStreamPath))
	h := con.Handler()
	mux.Handle("/", otelhttp.NewHandler(h, "console", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method + " " + consoleRoute(r.URL.Path)
	})))
	return watchRuns, nil
}

// consoleRoute names a console request's span without the run's name.
func consoleRoute(p string) string {
	if strings.HasPrefix(p, "/console/api/runs/") {
		if strings.HasSuffix(p, "/cancel") {
			return "/console/api/runs/{kind}/{name}/cancel"
		}
		return "/console/api/runs/{kind}/{name}"
	}
	return p
}
