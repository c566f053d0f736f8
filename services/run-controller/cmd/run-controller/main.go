// Command run-controller turns AgentRuns into Jobs and OrchestrationRuns into AgentRuns.
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import "github.com/agentplane/agentplane/libs/app"

func main() {
	app.Main("run-controller", 50056, 9106, nil)
}
