package wiring

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/connect"
	"github.com/agentplane/agentplane/libs/leader"
)

// Setup reads cancel-propagator's configuration and runs it as a background task, under leader
// election when it is on.
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
	c, err := connect.Controller(rt, env, nil)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.REST)
	if err != nil {
		c.Close()
		return fmt.Errorf("dynamic client: %w", err)
	}
	p, err := New(cfg, Deps{Kube: c.Kube, Dynamic: dyn, REST: c.REST, Status: c.Status, Events: c.Events, Registry: rt.Registry})
	if err != nil {
		c.Close()
		return err
	}
	rt.Logger.Info("cancel-propagator configured", "namespaces", ns, "statusWriter", c.StatusAddr, "eventEmitter", c.EventsAddr,
		"enabled", cfg.Enabled, "timeout", cfg.Timeout)
	rt.Go("cancel-propagator", func(ctx context.Context) error {
		defer c.Close()
		return leader.RunService(ctx, rt.Config, c.Kube, p.Run)
	})
	return nil
}
