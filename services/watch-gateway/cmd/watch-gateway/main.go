// Command watch-gateway streams control-plane health over SSE and gRPC (seed 004).
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import "github.com/agentplane/agentplane/libs/app"

func main() {
	app.Main("watch-gateway", 50051, 9101, nil)
}
