// Package service wires job-gc into the common service runner: clients for the API server,
// status-writer and event-emitter, leader election, and the controller.
package service

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/backends"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/leader"
	"github.com/agentplane/agentplane/services/job-gc/internal/gc"
)

// Setup reads job-gc's configuration and runs it as a background task, under leader election
// when it is on.
func Setup(_ context.Context, rt *app.Runtime) error {
	ns := rt.Config.Namespaces
	if len(ns) == 0 {
		ns = []string{rt.Config.PodNamespace}
	}
	env := config.FromOS()
	cfg, err := gc.LoadConfig(env, ns)
	if err != nil {
		return err
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_job_gc_api_requests_total",
		Help: "Requests job-gc made to the API server, by verb (get is a read of one object, such as a Job missing from the cache confirmed live; list and watch feed the informers).",
	}, []string{"verb"})
	rt.Registry.MustRegister(requests)
	c, err := backends.Dial(rt, env, func(rc *rest.Config) { kube.CountRequests(rc, requests) })
	if err != nil {
		return err
	}
	g, err := gc.New(cfg, gc.Deps{Kube: c.Kube, REST: c.REST, Status: c.Status, Events: c.Events, Registry: rt.Registry})
	if err != nil {
		c.Close()
		return err
	}
	rt.Logger.Info("job-gc configured", "namespaces", ns, "statusWriter", c.StatusAddr, "eventEmitter", c.EventsAddr,
		"agentRunRetention", cfg.Retention, "missingJobGrace", cfg.MissingGrace, "holdWarning", cfg.HoldWarning)
	rt.Go("job-gc", func(ctx context.Context) error {
		defer c.Close()
		return leader.RunService(ctx, rt.Config, c.Kube, g.Run)
	})
	return nil
}
