// Command cancel-propagator stops everything an OrchestrationRun or AgentRun started when its
// spec.cancel is set, and brings the run to phase Cancelled within a bound (seed 003).
//
// Configuration comes from the environment (JANGAR_ORCHESTRATION_CANCEL_ENABLED,
// JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS, JANGAR_STATUS_WRITER_ADDR, JANGAR_EVENT_EMITTER_ADDR,
// and the common JANGAR_*, KUBECONFIG, OTEL_*); see docs/architecture.md.
package main

import (
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/wiring"
)

func main() {
	app.Main("cancel-propagator", 50055, 9105, wiring.Setup)
}
