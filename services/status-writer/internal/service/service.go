// Package service wires status-writer into the common service runner.
package service

import (
	"context"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/kube"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
	"github.com/agentplane/agentplane/services/status-writer/internal/writer"
)

// Setup registers the StatusWriter gRPC service.
func Setup(_ context.Context, rt *app.Runtime) error {
	clients, err := kube.NewClients(rt.Config)
	if err != nil {
		return err
	}
	w := writer.New(clients.Dynamic, writer.Options{Metrics: writer.NewMetrics(rt.Registry)})
	pb.RegisterStatusWriterServer(rt.GRPC, writer.NewServer(w))
	rt.SetServing(pb.StatusWriter_ServiceDesc.ServiceName, true)
	return nil
}
