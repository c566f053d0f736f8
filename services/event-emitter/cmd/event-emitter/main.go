// Command event-emitter turns reconcile failures into Kubernetes Events (seed 001): stable
// reasons, sanitized notes, a per-object token bucket in Redis shared by every replica.
//
// Configuration comes from the environment: JANGAR_CONTROLLER_EVENTS_ENABLED,
// JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN, JANGAR_CONTROLLER_EVENTS_BURST,
// JANGAR_REDIS_URL, JANGAR_REDIS_PASSWORD, and the common JANGAR_GRPC_*, KUBECONFIG, OTEL_*.
package main

import (
	"github.com/agentplane/agentplane/libs/access"
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/services/event-emitter/internal/wiring"
)

func main() {
	app.MainOptions("event-emitter", 50053, 9103, app.Options{Setup: wiring.Setup, GRPCServerOptions: access.GRPCServerOptions})
}
