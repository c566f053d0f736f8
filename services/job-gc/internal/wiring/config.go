package wiring

import (
	"fmt"
	"time"

	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/config"
)

// Config is job-gc's own configuration, read from the environment; the chart's values map onto
// these variables one to one.
type Config struct {
	// Namespaces job-gc acts in.
	Namespaces []string
	// Retention is how long a finished AgentRun without spec.ttlSecondsAfterFinished is kept
	// before job-gc deletes it and its Jobs: JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS.
	Retention time.Duration
	// OrchRetention is how long a finished OrchestrationRun without spec.ttlSecondsAfterFinished is
	// kept before job-gc deletes it, its step AgentRuns and their Jobs:
	// JANGAR_AGENTS_CONTROLLER_ORCHESTRATIONRUN_RETENTION_SECONDS.
	OrchRetention time.Duration
	// MissingGrace is how long a run whose Job is gone (or being deleted before it finished) is
	// reported as missing its Job before it fails with WorkflowJobMissing:
	// JANGAR_JOB_GC_MISSING_JOB_GRACE_SECONDS.
	MissingGrace time.Duration
	// HoldWarning is how long a finished or deleted Job may keep its job-result finalizer before
	// job-gc raises a Warning about it: JANGAR_JOB_GC_HOLD_WARNING_SECONDS.
	HoldWarning time.Duration
	// Workers reconcile in parallel, per queue: JANGAR_JOB_GC_WORKERS.
	Workers int
	// Archive is the run archive (JANGAR_ARCHIVE_URL, JANGAR_ARCHIVE_PASSWORD); no URL: archiving
	// is off, and job-gc releases the archive finalizer from runs that still have it.
	Archive archive.Config
	// ArchiveLogLines is how many lines of each container's log a run's archive record keeps:
	// JANGAR_ARCHIVE_LOG_LINES (0: logs are not read).
	ArchiveLogLines int
	// ArchiveRetention is how long an archived run is kept (from when it finished) before job-gc
	// deletes its row: JANGAR_ARCHIVE_RETENTION_SECONDS (0: archived runs are kept).
	ArchiveRetention time.Duration
	// ArchivePruneEvery is how often the archive's retention runs (DefaultArchivePruneEvery when
	// 0); the tests shorten it.
	ArchivePruneEvery time.Duration
}

// The variables, by name.
const (
	EnvRetention     = "JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS"
	EnvOrchRetention = "JANGAR_AGENTS_CONTROLLER_ORCHESTRATIONRUN_RETENTION_SECONDS"
	EnvMissingGrace  = "JANGAR_JOB_GC_MISSING_JOB_GRACE_SECONDS"
	EnvHoldWarning   = "JANGAR_JOB_GC_HOLD_WARNING_SECONDS"
	EnvWorkers       = "JANGAR_JOB_GC_WORKERS"
	EnvArchiveLogs   = "JANGAR_ARCHIVE_LOG_LINES"
	EnvArchiveKeep   = "JANGAR_ARCHIVE_RETENTION_SECONDS"
)

// Defaults: 30 days of retention (the seed's cluster value), a minute of grace, an hour of hold.
const (
	DefaultRetention    = 30 * 24 * time.Hour
	DefaultMissingGrace = time.Minute
	DefaultHoldWarning  = time.Hour
	// DefaultArchiveRetention keeps archived runs 90 days; DefaultArchivePruneEvery is how often
	// the rows past it are deleted.
	DefaultArchiveRetention  = 90 * 24 * time.Hour
	DefaultArchivePruneEvery = 10 * time.Minute
)

// LoadConfig reads job-gc's settings; every bad value is reported at once, by name. namespaces
// are the service's (JANGAR_AGENTS_CONTROLLER_NAMESPACES, else the pod's namespace).
func LoadConfig(env *config.Env, namespaces []string) (Config, error) {
	seconds := func(name string, def time.Duration, min int) time.Duration {
		v := env.Int(name, int(def/time.Second))
		if v < min || v > 10*365*24*3600 {
			env.Fail(name, fmt.Sprint(v), fmt.Sprintf("a whole number of seconds between %d and 315360000 (ten years)", min))
			return def
		}
		return time.Duration(v) * time.Second
	}
	c := Config{
		Namespaces:      namespaces,
		Retention:       seconds(EnvRetention, DefaultRetention, 0),
		OrchRetention:   seconds(EnvOrchRetention, DefaultRetention, 0),
		MissingGrace:    seconds(EnvMissingGrace, DefaultMissingGrace, 1),
		HoldWarning:     seconds(EnvHoldWarning, DefaultHoldWarning, 1),
		Workers:         env.Int(EnvWorkers, 4),
		Archive:         archive.LoadConfig(env),
		ArchiveLogLines: env.Int(EnvArchiveLogs, 100),
	}
	c.ArchiveRetention = seconds(EnvArchiveKeep, DefaultArchiveRetention, 0)
	if c.ArchiveLogLines < 0 || c.ArchiveLogLines > 10000 {
		env.Fail(EnvArchiveLogs, fmt.Sprint(c.ArchiveLogLines), "between 0 (no logs) and 10000")
	}
	if c.Workers < 1 || c.Workers > 256 {
		env.Fail(EnvWorkers, fmt.Sprint(c.Workers), "between 1 and 256")
	}
	return c, env.Err()
}
