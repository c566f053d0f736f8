// Package connect connects a controller (run-controller, job-gc, cancel-propagator) to what it
// talks to: the API server, status-writer (JANGAR_STATUS_WRITER_ADDR) and
// event-emitter (JANGAR_EVENT_EMITTER_ADDR), identified to them by the ServiceAccount token in
// JANGAR_SERVICE_TOKEN_FILE or a client certificate (JANGAR_GRPC_CLIENT_*; see libs/access).
package connect

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/access"
	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/statusclient"
)

// The variables, by name, and their defaults (the local control plane's ports).
const (
	EnvStatusWriterAddr = "JANGAR_STATUS_WRITER_ADDR"
	EnvEventEmitterAddr = "JANGAR_EVENT_EMITTER_ADDR"
)

// Clients are a controller's connections.
type Clients struct {
	REST                   *rest.Config
	Kube                   kubernetes.Interface
	Status                 *statusclient.Client
	Events                 *eventclient.Client
	StatusAddr, EventsAddr string
}

// Controller builds the clients of the controller service rt. instrument, if not nil, sees the API server
// configuration before any client is built from it (to count requests, say). Events never hold
// a reconcile for long: a few seconds of retries, then the event is dropped (and logged).
func Controller(rt *app.Runtime, env *config.Env, instrument func(*rest.Config)) (*Clients, error) {
	c := &Clients{
		StatusAddr: env.String(EnvStatusWriterAddr, "127.0.0.1:50052"),
		EventsAddr: env.String(EnvEventEmitterAddr, "127.0.0.1:50053"),
	}
	rc, err := kubeclient.ForService(rt.Config)
	if err != nil {
		return nil, err
	}
	if instrument != nil {
		instrument(rc)
	}
	c.REST = rc
	if c.Kube, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dial, err := access.LoadClientAuth(env).DialOptions()
	if err != nil {
		return nil, err
	}
	if c.Status, err = statusclient.New(c.StatusAddr, rt.Config.Name, statusclient.Options{Dial: dial}); err != nil {
		return nil, err
	}
	c.Events, err = eventclient.New(c.EventsAddr, rt.Config.Name, rt.Config.Identity,
		eventclient.Options{RetryFor: 5 * time.Second, AttemptTimeout: 2 * time.Second, Dial: dial})
	if err != nil {
		_ = c.Status.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the gRPC connections.
func (c *Clients) Close() {
	_ = c.Status.Close()
	_ = c.Events.Close()
}
