// Command job-gc keeps each agent-runner Job until its AgentRun has recorded the outcome (the
// agents.proompteng.ai/job-result finalizer), then lets Kubernetes delete it (seed 002).
// `job-gc release-holds` releases every hold in the namespaces it serves and exits (the chart's
// pre-delete hook: nothing releases them once job-gc is gone).
//
// Configuration comes from the environment (JANGAR_*, KUBECONFIG, OTEL_*); see
// docs/architecture.md.
package main

import (
	"context"
	"os"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/services/job-gc/internal/wiring"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "release-holds" {
		os.Exit(wiring.ReleaseHolds(context.Background(), config.FromOS(), os.Stdout, os.Stderr))
	}
	app.Main("job-gc", 50054, 9104, wiring.Setup)
}
