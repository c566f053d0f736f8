package access

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/kubeclient"
)

// GRPCServerOptions is an app.Options.GRPCServerOptions for a server whose callers are the
// controllers (status-writer, event-emitter): it reads JANGAR_GRPC_AUTH_* and JANGAR_GRPC_TLS_*
// and guards every call but health checks.
func GRPCServerOptions(svc config.Service, reg prometheus.Registerer) ([]grpc.ServerOption, error) {
	a, err := LoadServerAuth(config.FromOS(), svc)
	if err != nil {
		return nil, err
	}
	log := slog.Default()
	switch {
	case a.Mode == None:
		log.Warn("callers are not authenticated ("+EnvAuthMode+"=none): listening on loopback only", "addr", svc.GRPCAddr)
		return nil, nil
	case a.Mode == Token && !a.TLS.Enabled():
		log.Warn("caller tokens travel in cleartext: set " + EnvTLSCertFile + " and " + EnvTLSKeyFile)
	}
	var g *Guard
	if a.Mode == Token {
		clients, err := kubeclient.NewClients(svc)
		if err != nil {
			return nil, err
		}
		g = NewGuard(a, clients.Kube, reg, ReviewerOptions{})
	} else {
		g = NewGuard(a, nil, reg, ReviewerOptions{})
	}
	log.Info("callers authenticated", "mode", string(a.Mode), "allowed", a.Callers.Users(), "audiences", a.Audiences)
	return g.ServerOptions()
}
