// Package wiring wires status-writer into the common service runner.
package wiring

import (
	"context"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/kubeclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
	"github.com/agentplane/agentplane/services/status-writer/internal/writer"
)

// Setup registers the StatusWriter gRPC service.
func Setup(_ context.Context, rt *app.Runtime) error {
	clients, err := kubeclient.NewClients(rt.Config)
	if err != nil {
		return err
	}
	w := writer.New(clients.Dynamic, writer.Options{Metrics: writer.NewMetrics(rt.Registry)})
	// The namespaces the controllers act in (JANGAR_AGENTS_CONTROLLER_NAMESPACES, else this
	// replica's own) are watched, so that writes there start from a cached copy instead of a GET.
	namespaces := rt.Config.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{rt.Config.PodNamespace}
	}
	rt.Logger.Info("status-writer configured", "watchedNamespaces", namespaces)
	rt.Go("informers", func(ctx context.Context) error { return w.Watch(ctx, namespaces) })
	pb.RegisterStatusWriterServer(rt.GRPC, writer.NewServer(w))
	rt.SetServing(pb.StatusWriter_ServiceDesc.ServiceName, true)
	return nil
}
