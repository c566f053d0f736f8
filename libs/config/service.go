package config

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Service is the configuration every agentplane service reads first. Variable names follow the
// seeds (JANGAR_*) where they name one; the rest use the same prefix.
type Service struct {
	// Name identifies the service in logs, traces and leader-election locks.
	Name string
	// GRPCAddr is where gRPC (and grpc.health.v1) listens: JANGAR_GRPC_HOST:JANGAR_GRPC_PORT.
	GRPCAddr string
	// MetricsAddr serves /metrics, /healthz and /readyz: JANGAR_METRICS_ADDR.
	MetricsAddr string
	// LogLevel is debug, info, warn or error: JANGAR_LOG_LEVEL.
	LogLevel string
	// LogFormat is json or text: JANGAR_LOG_FORMAT.
	LogFormat string
	// Namespaces the service acts in; empty means the namespace it runs in:
	// JANGAR_AGENTS_CONTROLLER_NAMESPACES.
	Namespaces []string
	// ShutdownTimeout bounds graceful shutdown after SIGTERM: JANGAR_SHUTDOWN_TIMEOUT.
	ShutdownTimeout time.Duration
	// Kubeconfig is the path to a kubeconfig; empty means in-cluster: KUBECONFIG.
	Kubeconfig string
	// LeaderElection turns on client-go leader election: JANGAR_LEADER_ELECTION_ENABLED.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease: JANGAR_LEADER_ELECTION_NAMESPACE.
	LeaderElectionNamespace string
	// LeaseName names the Lease: JANGAR_LEADER_ELECTION_LEASE_NAME, default agentplane-<service>
	// (the charts give each release its own).
	LeaseName string
	// LegacyLeaseName, when set, is a Lease held with LeaseName: the one earlier releases elected
	// on, so that their replicas and this one's never lead at once during an upgrade:
	// JANGAR_LEADER_ELECTION_LEGACY_LEASE_NAME.
	LegacyLeaseName string
	// Lease timings: JANGAR_LEADER_ELECTION_LEASE_DURATION (15s), _RENEW_DEADLINE (10s),
	// _RETRY_PERIOD (2s). A replica that stops renewing is replaced within the lease duration.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// KubeQPS and KubeBurst bound the client-side request rate to the API server:
	// JANGAR_KUBE_API_QPS, JANGAR_KUBE_API_BURST.
	KubeQPS   int
	KubeBurst int
	// Identity names this replica (POD_NAME, else the host name).
	Identity string
	// PodNamespace is where this replica runs (POD_NAMESPACE).
	PodNamespace string
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics port:
	// JANGAR_DEBUG_PPROF. Off by default: whoever reaches the metrics port could read them.
	Pprof bool
}

// DefaultGRPCPort is the gRPC port of the seeds' charts.
const DefaultGRPCPort = 50051

// LoadService reads the common service configuration. defaultGRPCPort and defaultMetricsPort let
// each service keep distinct local defaults so that they can share one host.
func LoadService(env *Env, name string, defaultGRPCPort, defaultMetricsPort int) (Service, error) {
	host, _ := os.Hostname()
	s := Service{Name: name}
	grpcHost := env.String("JANGAR_GRPC_HOST", "127.0.0.1")
	grpcPort := env.Int("JANGAR_GRPC_PORT", defaultGRPCPort)
	s.GRPCAddr = net.JoinHostPort(grpcHost, strconv.Itoa(grpcPort))
	s.MetricsAddr = env.String("JANGAR_METRICS_ADDR", net.JoinHostPort("127.0.0.1", strconv.Itoa(defaultMetricsPort)))
	s.LogLevel = env.String("JANGAR_LOG_LEVEL", "info")
	s.LogFormat = env.String("JANGAR_LOG_FORMAT", "json")
	s.Namespaces = env.List("JANGAR_AGENTS_CONTROLLER_NAMESPACES", nil)
	s.ShutdownTimeout = env.Duration("JANGAR_SHUTDOWN_TIMEOUT", 20*time.Second)
	s.Kubeconfig = env.String("KUBECONFIG", "")
	s.KubeQPS = env.Int("JANGAR_KUBE_API_QPS", 100)
	s.KubeBurst = env.Int("JANGAR_KUBE_API_BURST", 200)
	s.LeaderElection = env.Bool("JANGAR_LEADER_ELECTION_ENABLED", false)
	s.PodNamespace = env.String("POD_NAMESPACE", "default")
	s.LeaderElectionNamespace = env.String("JANGAR_LEADER_ELECTION_NAMESPACE", s.PodNamespace)
	s.LeaseName = env.String("JANGAR_LEADER_ELECTION_LEASE_NAME", "agentplane-"+name)
	s.LegacyLeaseName = env.String("JANGAR_LEADER_ELECTION_LEGACY_LEASE_NAME", "")
	s.LeaseDuration = env.Duration("JANGAR_LEADER_ELECTION_LEASE_DURATION", 15*time.Second)
	s.RenewDeadline = env.Duration("JANGAR_LEADER_ELECTION_RENEW_DEADLINE", 10*time.Second)
	s.RetryPeriod = env.Duration("JANGAR_LEADER_ELECTION_RETRY_PERIOD", 2*time.Second)
	if s.LeaderElection && !(s.LeaseDuration > s.RenewDeadline && s.RenewDeadline > s.RetryPeriod && s.RetryPeriod > 0) {
		env.fail("JANGAR_LEADER_ELECTION_RENEW_DEADLINE", s.RenewDeadline.String(),
			"between JANGAR_LEADER_ELECTION_RETRY_PERIOD and JANGAR_LEADER_ELECTION_LEASE_DURATION (lease > renew deadline > retry period > 0)")
	}
	s.Identity = env.String("POD_NAME", host)
	s.Pprof = env.Bool("JANGAR_DEBUG_PPROF", false)
	if grpcPort < 0 || grpcPort > 65535 {
		env.fail("JANGAR_GRPC_PORT", strconv.Itoa(grpcPort), "a port between 0 and 65535")
	}
	switch s.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		env.fail("JANGAR_LOG_LEVEL", s.LogLevel, "one of debug, info, warn, error")
	}
	switch s.LogFormat {
	case "json", "text":
	default:
		env.fail("JANGAR_LOG_FORMAT", s.LogFormat, "json or text")
	}
	if err := env.Err(); err != nil {
		return s, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}
