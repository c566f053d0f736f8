package wiring

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/connect"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/leader"
)

// Setup wires job-gc into the common service runner: it reads job-gc's configuration, dials
// the API server, status-writer and event-emitter, and runs the controller as a background
// task, under leader election when it is on.
func Setup(_ context.Context, rt *app.Runtime) error {
	ns := rt.Config.Namespaces
	if len(ns) == 0 {
		ns = []string{rt.Config.PodNamespace}
	}
	env := config.FromOS()
	cfg, err := LoadConfig(env, ns)
	if err != nil {
		return err
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_job_gc_api_requests_total",
		Help: "Requests job-gc made to the API server, by verb (get is a read of one object, such as a Job missing from the cache confirmed live; list and watch feed the informers).",
	}, []string{"verb"})
	rt.Registry.MustRegister(requests)
	c, err := connect.Controller(rt, env, func(rc *rest.Config) { kubeclient.CountRequests(rc, requests) })
	if err != nil {
		return err
	}
	d := Deps{Kube: c.Kube, REST: c.REST, Status: c.Status, Events: c.Events, Registry: rt.Registry}
	var store *lazyStore
	if cfg.Archive.Enabled() {
		store = newLazyStore(cfg.Archive)
		d.Archive = store
	}
	g, err := New(cfg, d)
	if err != nil {
		c.Close()
		return err
	}
	rt.Logger.Info("job-gc configured", "namespaces", ns, "statusWriter", c.StatusAddr, "eventEmitter", c.EventsAddr,
		"agentRunRetention", cfg.Retention, "missingJobGrace", cfg.MissingGrace, "holdWarning", cfg.HoldWarning,
		"archive", cfg.Archive.Enabled())
	rt.Go("job-gc", func(ctx context.Context) error {
		defer c.Close()
		if store != nil {
			defer store.Close()
		}
		return leader.RunService(ctx, rt.Config, c.Kube, g.Run)
	})
	return nil
}
