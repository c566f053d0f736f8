// Command watch-gateway streams control-plane health (seed 004): HTTP SSE at
// GET /api/agents/control-plane/status/stream and gRPC AgentctlService.WatchControlPlaneStatus.
//
// Configuration: JANGAR_HTTP_ADDR, JANGAR_WATCH_HEARTBEAT, JANGAR_WATCH_DEBOUNCE,
// JANGAR_WATCH_TARGETS, JANGAR_REDIS_URL and the common JANGAR_GRPC_*, KUBECONFIG, OTEL_*.
package main

import (
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/service"
)

func main() {
	app.Main("watch-gateway", 50051, 9101, service.Setup)
}
