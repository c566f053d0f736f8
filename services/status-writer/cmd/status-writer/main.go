// Command status-writer is the one writer of .status for agentplane's CRDs (seed 000).
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import "github.com/agentplane/agentplane/libs/app"

func main() {
	app.Main("status-writer", 50052, 9102, nil)
}
