package wiring

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/connect"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/leader"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// Setup reads run-controller's configuration and runs the controller as a background task,
// under leader election when it is on.
func Setup(_ context.Context, rt *app.Runtime) error {
	env := config.FromOS()
	cfg, err := core.LoadConfig(env, rt.Config)
	if err != nil {
		return err
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_run_controller_api_requests_total",
		Help: "Requests run-controller made to the API server, by verb (get is a read of one object; list and watch feed the informers).",
	}, []string{"verb"})
	ttl := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "agentplane_run_controller_job_ttl_seconds",
		Help: "ttlSecondsAfterFinished written on every Job (JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS); a run's pod logs live as long as its Job.",
	})
	ttl.Set(float64(cfg.JobTTLSeconds))
	rt.Registry.MustRegister(requests, ttl)
	c, err := connect.Controller(rt, env, func(rc *rest.Config) { kubeclient.CountRequests(rc, requests) })
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfig(c.REST)
	if err != nil {
		c.Close()
		return fmt.Errorf("metadata client: %w", err)
	}
	ctl, err := New(cfg, Deps{
		Kube: c.Kube, Metadata: md, REST: c.REST, Status: c.Status, Events: c.Events, Metrics: core.NewMetrics(rt.Registry),
	})
	if err != nil {
		c.Close()
		return err
	}
	rt.Logger.Info("run-controller configured", "namespaces", cfg.Namespaces, "statusWriter", c.StatusAddr,
		"eventEmitter", c.EventsAddr, "jobTTLSeconds", cfg.JobTTLSeconds, "leaderElection", rt.Config.LeaderElection)
	rt.Go("controller", func(ctx context.Context) error {
		defer c.Close()
		return leader.RunService(ctx, rt.Config, c.Kube, ctl.Run)
	})
	return nil
}
