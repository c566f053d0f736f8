package wiring

import (
	"fmt"
	"time"

	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/services/cancel-propagator/internal/cancel"
)

// Config is cancel-propagator's own configuration, read from the environment; the chart's
// values map onto these variables one to one.
type Config struct {
	// Namespaces cancel-propagator acts in.
	Namespaces []string
	// Enabled turns cancel support on (JANGAR_ORCHESTRATION_CANCEL_ENABLED, default true). Off,
	// a cancel request is left alone and a condition says so (the seed's rollback).
	Enabled bool
	// Timeout bounds a cancel: once it passes the run is Cancelled anyway, with reason
	// CancelTimedOut naming what still ran (JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS).
	Timeout time.Duration
	// Workers reconcile in parallel (JANGAR_CANCEL_PROPAGATOR_WORKERS).
	Workers int
}

// The variables, by name (the cancel protocol's messages name the first two: package cancel
// spells them).
const (
	EnvEnabled = cancel.EnvEnabled // JANGAR_ORCHESTRATION_CANCEL_ENABLED
	EnvTimeout = cancel.EnvTimeout // JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS
	EnvWorkers = "JANGAR_CANCEL_PROPAGATOR_WORKERS"
)

// DefaultTimeout leaves a pod its default 30s grace period, and then some.
const DefaultTimeout = 60 * time.Second

// LoadConfig reads cancel-propagator's settings; every bad value is reported at once, by name.
func LoadConfig(env *config.Env, namespaces []string) (Config, error) {
	c := Config{
		Namespaces: namespaces,
		Enabled:    env.Bool(EnvEnabled, true),
		Timeout:    env.Millis(EnvTimeout, DefaultTimeout),
		Workers:    env.Int(EnvWorkers, 4),
	}
	if c.Timeout < 100*time.Millisecond || c.Timeout > 24*time.Hour {
		env.Fail(EnvTimeout, fmt.Sprint(c.Timeout.Milliseconds()), "between 100 and 86400000 milliseconds")
	}
	if c.Workers < 1 || c.Workers > 256 {
		env.Fail(EnvWorkers, fmt.Sprint(c.Workers), "between 1 and 256")
	}
	return c, env.Err()
}
