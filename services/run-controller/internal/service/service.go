// Package service wires run-controller into the common service runner: clients for the API
// server, status-writer and event-emitter, leader election, and the controller.
package service

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/leader"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/services/run-controller/internal/controller"
)

// Setup reads run-controller's configuration and runs the controller as a background task,
// under leader election when it is on.
func Setup(_ context.Context, rt *app.Runtime) error {
	env := config.FromOS()
	cfg, err := controller.LoadConfig(env, rt.Config)
	if err != nil {
		return err
	}
	statusAddr := env.String("JANGAR_STATUS_WRITER_ADDR", "127.0.0.1:50052")
	eventsAddr := env.String("JANGAR_EVENT_EMITTER_ADDR", "127.0.0.1:50053")
	rc, err := kube.ForService(rt.Config)
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
	kube.CountRequests(rc, requests)
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	sw, err := statusclient.New(statusAddr, rt.Config.Name, statusclient.Options{})
	if err != nil {
		return err
	}
	// Events never hold a reconcile for long: a few seconds of retries, then the event is dropped
	// (and logged).
	ev, err := eventclient.New(eventsAddr, rt.Config.Name, rt.Config.Identity, eventclient.Options{RetryFor: 5 * time.Second, AttemptTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	ctl, err := controller.New(cfg, controller.Deps{
		Kube: kc, Metadata: md, REST: rc, Status: sw, Events: ev, Metrics: controller.NewMetrics(rt.Registry),
	})
	if err != nil {
		return err
	}
	rt.Logger.Info("run-controller configured", "namespaces", cfg.Namespaces, "statusWriter", statusAddr,
		"eventEmitter", eventsAddr, "jobTTLSeconds", cfg.JobTTLSeconds, "leaderElection", rt.Config.LeaderElection)
	rt.Go("controller", func(ctx context.Context) error {
		defer sw.Close()
		defer ev.Close()
		return leader.RunService(ctx, rt.Config, kc, ctl.Run)
	})
	return nil
}
