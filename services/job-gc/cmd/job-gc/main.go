// Command job-gc keeps each agent-runner Job until its AgentRun has recorded the outcome (the
// agents.proompteng.ai/job-result finalizer), then lets Kubernetes delete it (seed 002).
//
// Configuration comes from the environment (JANGAR_*, KUBECONFIG, OTEL_*); see
// docs/architecture.md.
package main

import (
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/job-gc/internal/wiring"
)

func main() {
	app.Main("job-gc", 50054, 9104, wiring.Setup)
}
