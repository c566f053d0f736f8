// Command watch-gateway streams control-plane health (seed 004): HTTP SSE at
// GET /api/agents/control-plane/status/stream and gRPC AgentctlService.WatchControlPlaneStatus.
//
// Configuration: JANGAR_HTTP_ADDR, JANGAR_WATCH_HEARTBEAT, JANGAR_WATCH_DEBOUNCE,
// JANGAR_WATCH_TARGETS, JANGAR_WATCH_AUTH_MODE (none|token|mtls), JANGAR_WATCH_AUTH_AUDIENCES,
// JANGAR_WATCH_AUTH_RECHECK, JANGAR_WATCH_MAX_STREAMS{,_PER_USER,_PER_ADDRESS}, JANGAR_WATCH_TLS_{CERT,KEY,CLIENT_CA}_FILE, JANGAR_REDIS_URL and the
// common JANGAR_GRPC_*, KUBECONFIG, OTEL_*.
package main

import (
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/wiring"
)

func main() {
	app.MainOptions("watch-gateway", 50051, 9101, app.Options{Setup: wiring.Setup, GRPCServerOptions: wiring.GRPCServerOptions})
}
