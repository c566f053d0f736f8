// Package service wires job-gc into the common service runner.
package service

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/kube"
	"github.com/agentplane/agentplane/libs/leader"
	"github.com/agentplane/agentplane/services/job-gc/internal/gc"
)

// Setup runs the job-result guard as a background task, under leader election when it is on.
func Setup(_ context.Context, rt *app.Runtime) error {
	ns := rt.Config.Namespaces
	if len(ns) == 0 {
		ns = []string{rt.Config.PodNamespace}
	}
	rc, err := kube.ForService(rt.Config)
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	g, err := gc.New(kc, rc, ns, rt.Registry)
	if err != nil {
		return err
	}
	rt.Go("job-gc", func(ctx context.Context) error { return leader.RunService(ctx, rt.Config, kc, g.Run) })
	return nil
}
