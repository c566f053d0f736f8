// Command status-writer is the one writer of .status for agentplane's CRDs (seed 000): every
// service asks it over gRPC, and it applies the status contract on every write.
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, JANGAR_KUBE_API_QPS, OTEL_*); see docs/architecture.md.
package main

import (
	"github.com/agentplane/agentplane/libs/access"
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/status-writer/internal/wiring"
)

func main() {
	app.MainOptions("status-writer", 50052, 9102, app.Options{Setup: wiring.Setup, GRPCServerOptions: access.GRPCServerOptions})
}
