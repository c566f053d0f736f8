// Command job-gc keeps Jobs until their AgentRun has recorded the outcome, then lets TTL and retention clean up (seed 002).
//
// Configuration comes from the environment (JANGAR_GRPC_HOST, JANGAR_GRPC_PORT,
// JANGAR_METRICS_ADDR, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import "github.com/agentplane/agentplane/libs/app"

func main() {
	app.Main("job-gc", 50054, 9104, nil)
}
