// Command run-controller turns AgentRuns into Jobs and OrchestrationRuns into AgentRuns, writing
// status through status-writer and events through event-emitter.
//
// Configuration comes from the environment (JANGAR_*, KUBECONFIG, OTEL_*); see
// docs/architecture.md.
package main

import (
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/run-controller/internal/wiring"
)

func main() {
	app.Main("run-controller", 50056, 9106, wiring.Setup)
}
