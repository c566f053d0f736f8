// Package wiring wires event-emitter into the common service runner.
package wiring

import (
	"context"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/libs/app"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/redisx"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
	"github.com/agentplane/agentplane/services/event-emitter/internal/emitter"
	"github.com/agentplane/agentplane/services/event-emitter/internal/limiter"
)

// RedisHealthService is the grpc.health.v1 name that is NOT_SERVING while Redis is unreachable
// and decisions fall back to in-process buckets (the service itself stays SERVING).
const RedisHealthService = "agentplane.v1.EventEmitter/redis"

// Config is event-emitter's own configuration (the seed's Config Mapping).
type Config struct {
	Enabled         bool
	PerMinute       int
	Burst           int
	TransientWindow time.Duration
	API             string
	Redis           redisx.Config
	RedisTimeout    time.Duration
}

// LoadConfig reads JANGAR_CONTROLLER_EVENTS_* and JANGAR_REDIS_*.
func LoadConfig(env *config.Env) (Config, error) {
	c := Config{
		Enabled:         env.Bool("JANGAR_CONTROLLER_EVENTS_ENABLED", true),
		PerMinute:       env.Int("JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN", 10),
		Burst:           env.Int("JANGAR_CONTROLLER_EVENTS_BURST", 5),
		TransientWindow: env.Duration("JANGAR_CONTROLLER_EVENTS_TRANSIENT_WINDOW", 5*time.Minute),
		API:             env.String("JANGAR_CONTROLLER_EVENTS_API", string(emitter.APIAuto)),
		Redis:           redisx.LoadConfig(env, "redis://127.0.0.1:6379/0"),
		RedisTimeout:    env.Duration("JANGAR_REDIS_TIMEOUT", 100*time.Millisecond),
	}
	if err := env.Err(); err != nil {
		return c, err
	}
	if _, err := c.Redis.Mode(); err != nil {
		return c, err
	}
	if c.PerMinute < 1 || c.Burst < 1 {
		return c, fmt.Errorf("JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN (%d) and JANGAR_CONTROLLER_EVENTS_BURST (%d) must be at least 1", c.PerMinute, c.Burst)
	}
	switch emitter.API(c.API) {
	case emitter.APIAuto, emitter.APIEventsV1, emitter.APICoreV1:
	default:
		return c, fmt.Errorf("JANGAR_CONTROLLER_EVENTS_API=%q must be auto, events.k8s.io/v1 or v1", c.API)
	}
	return c, nil
}

// Setup registers the EventEmitter gRPC service and its writer.
func Setup(ctx context.Context, rt *app.Runtime) error {
	c, err := LoadConfig(config.FromOS())
	if err != nil {
		return err
	}
	clients, err := kubeclient.NewClients(rt.Config)
	if err != nil {
		return err
	}
	kc, dyn := clients.Kube, clients.Dynamic
	rdb, err := redisx.New(c.Redis, redisx.Options{Timeout: c.RedisTimeout, PoolSize: 64})
	if err != nil {
		return err
	}
	m := emitter.NewMetrics(rt.Registry)
	lim, err := limiter.New(rdb, limiter.Config{PerMinute: float64(c.PerMinute), Burst: c.Burst, TransientWindow: c.TransientWindow},
		func(degraded bool) {
			rt.SetServing(RedisHealthService, !degraded)
			if degraded {
				m.Fallback.Set(1)
				rt.Logger.Warn("redis unreachable: rate limiting in-process until it returns")
			} else {
				m.Fallback.Set(0)
				rt.Logger.Info("redis reachable again: rate limiting shared across replicas")
			}
		},
		func(d time.Duration) { m.RedisSeconds.Observe(d.Seconds()) })
	if err != nil {
		return err
	}
	rt.SetServing(RedisHealthService, true)
	if err := lim.Load(ctx); err != nil {
		rt.Logger.Warn("redis unreachable at start: rate limiting in-process until it returns")
	}
	e := emitter.New(kc, dyn, lim, m, emitter.Config{
		Enabled: c.Enabled, API: emitter.API(c.API), DefaultInstance: rt.Config.Identity,
	})
	pb.RegisterEventEmitterServer(rt.GRPC, emitter.NewServer(e))
	rt.SetServing(pb.EventEmitter_ServiceDesc.ServiceName, true)
	rt.Go("event writer", e.Run)
	// The AgentRuns of the namespaces the controllers act in are watched (their Secret names
	// only), so that redacting an event about one needs no GET.
	namespaces := rt.Config.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{rt.Config.PodNamespace}
	}
	rt.Go("run informers", func(ctx context.Context) error { return e.WatchRuns(ctx, namespaces) })
	rt.Go("redis client", func(ctx context.Context) error { <-ctx.Done(); return rdb.Close() })
	return nil
}
