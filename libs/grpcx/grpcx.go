// Package grpcx builds gRPC servers and clients the same way in every service: OpenTelemetry
// stats handlers, Prometheus metrics per method and code, grpc.health.v1, server reflection,
// keepalive, and client retries on UNAVAILABLE.
package grpcx

import (
	"context"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// ServerMetrics are the gRPC server metrics of go-grpc-middleware's Prometheus provider, under
// their standard names and labels (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_received_total, grpc_server_msg_sent_total with grpc_type, grpc_service,
// grpc_method and, when handled, grpc_code; the grpc_server_handling_seconds histogram), so that
// the dashboards and alerts written for any gRPC server read them.
type ServerMetrics struct {
	*grpcprom.ServerMetrics
}

// The series ServerMetrics registers (the dashboards and the benchmarks read them by name).
const (
	MetricStarted      = "grpc_server_started_total"
	MetricHandled      = "grpc_server_handled_total"
	MetricMsgReceived  = "grpc_server_msg_received_total"
	MetricMsgSent      = "grpc_server_msg_sent_total"
	MetricHandlingTime = "grpc_server_handling_seconds"
)

// NewServerMetrics registers the gRPC server metrics with reg.
func NewServerMetrics(reg prometheus.Registerer) *ServerMetrics {
	m := &ServerMetrics{grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.0005, 2, 16))))}
	reg.MustRegister(m)
	return m
}

// Server is a gRPC server with its health service.
type Server struct {
	*grpc.Server
	Health *health.Server

	streams       context.Context
	endStreams    context.CancelFunc
	metrics       *ServerMetrics
	healthWatches *watchBound
}

// NewServer returns a server instrumented with otelgrpc and metrics, with grpc.health.v1 (its
// unauthenticated Watch streams bounded: HealthWatchMax, HealthWatchPerAddress) and reflection
// registered. Extra options (credentials, auth interceptors) come after the defaults.
func NewServer(reg prometheus.Registerer, extra ...grpc.ServerOption) *Server {
	s := &Server{Health: health.NewServer(), healthWatches: newWatchBound(HealthWatchMax, HealthWatchPerAddress)}
	s.streams, s.endStreams = context.WithCancel(context.Background())
	s.Server, s.metrics = newInstrumentedServer(reg, append([]grpc.ServerOption{grpc.ChainStreamInterceptor(s.endable, s.boundHealthWatches)}, extra...)...)
	healthpb.RegisterHealthServer(s.Server, s.Health)
	reflection.Register(s.Server)
	return s
}

// InitMetrics creates the metric series of every method registered so far (started, and handled
// with each code; the latency histogram), so that dashboards and rate() see them before the first
// call completes. app.Run calls it once the service has registered its own.
func (s *Server) InitMetrics() { s.metrics.InitializeMetrics(s.Server) }

// EndStreams cancels the context of every open stream, so long-lived streams (health watches,
// status watches) return and GracefulStop can finish instead of waiting out its timeout.
func (s *Server) EndStreams() { s.endStreams() }

func (s *Server) endable(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	return h(srv, &endableStream{ServerStream: ss, ctx: ctx})
}

type endableStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (e *endableStream) Context() context.Context { return e.ctx }

func newInstrumentedServer(reg prometheus.Registerer, extra ...grpc.ServerOption) (*grpc.Server, *ServerMetrics) {
	m := NewServerMetrics(reg)
	opts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(m.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.StreamServerInterceptor()),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	return grpc.NewServer(append(opts, extra...)...), m
}

// retryServiceConfig retries UNAVAILABLE (a restarting peer) with backoff. Calls must still be
// idempotent: every agentplane RPC is.
const retryServiceConfig = `{
  "methodConfig": [{
    "name": [{}],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.1s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// ClientOptions configure Dial.
type ClientOptions struct {
	// TLS, when set, is used instead of plaintext.
	TLS credentials.TransportCredentials
	// Extra dial options, applied last.
	Extra []grpc.DialOption
}

// Dial returns a client connection to target with otelgrpc, keepalive and retries on
// UNAVAILABLE. The connection is lazy: it does not fail when the peer is not up yet.
func Dial(target string, o ClientOptions) (*grpc.ClientConn, error) {
	creds := o.TLS
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultServiceConfig(retryServiceConfig),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
	return grpc.NewClient(target, append(opts, o.Extra...)...)
}
