// Command event-emitter turns reconcile failures into rate-limited Kubernetes Events (seed 001).
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import "github.com/agentplane/agentplane/libs/app"

func main() {
	app.Main("event-emitter", 50053, 9103, nil)
}
