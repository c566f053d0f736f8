// Package service wires cancel-propagator into the common service runner: clients for the API
// server, status-writer and event-emitter, leader election, and the controller.
package service

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/leader"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

// Setup reads cancel-propagator's configuration and runs it as a background task, under leader
// election when it is on.
func Setup(_ context.Context, rt *app.Runtime) error {
	ns := rt.Config.Namespaces
	if len(ns) == 0 {
		ns = []string{rt.Config.PodNamespace}
	}
	env := config.FromOS()
	cfg, err := cancel.LoadConfig(env, ns)
	statusAddr := env.String("JANGAR_STATUS_WRITER_ADDR", "127.0.0.1:50052")
	eventsAddr := env.String("JANGAR_EVENT_EMITTER_ADDR", "127.0.0.1:50053")
	if err != nil {
		return err
	}
	rc, err := kube.ForService(rt.Config)
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	sw, err := statusclient.New(statusAddr, rt.Config.Name, statusclient.Options{})
	if err != nil {
		return err
	}
	ev, err := eventclient.New(eventsAddr, rt.Config.Name, rt.Config.Identity, eventclient.Options{RetryFor: 5 * time.Second, AttemptTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	p, err := cancel.New(cfg, cancel.Deps{Kube: kc, Dynamic: dyn, REST: rc, Status: sw, Events: ev, Registry: rt.Registry})
	if err != nil {
		return err
	}
	rt.Logger.Info("cancel-propagator configured", "namespaces", ns, "statusWriter", statusAddr, "eventEmitter", eventsAddr,
		"enabled", cfg.Enabled, "timeout", cfg.Timeout)
	rt.Go("cancel-propagator", func(ctx context.Context) error {
		defer sw.Close()
		defer ev.Close()
		return leader.RunService(ctx, rt.Config, kc, p.Run)
	})
	return nil
}
