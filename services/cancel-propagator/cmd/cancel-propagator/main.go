// Command cancel-propagator stops everything an OrchestrationRun started when spec.cancel is set (seed 003).
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import "github.com/agentplane/agentplane/libs/app"

func main() {
	app.Main("cancel-propagator", 50055, 9105, nil)
}
