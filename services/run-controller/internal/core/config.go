package core

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/agentplane/agentplane/libs/config"
)

// Config is run-controller's own configuration, read from the environment (the seeds'
// JANGAR_* names; the chart's values map onto them one to one).
type Config struct {
	// Namespaces the controller acts in.
	Namespaces []string
	// JobTTLSeconds is the ttlSecondsAfterFinished of every Job: JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS.
	JobTTLSeconds int32
	// JobFinalizer puts agents.proompteng.ai/job-result on every Job so that job-gc can keep it
	// until its result is in the run's status: JANGAR_AGENT_RUNNER_JOB_FINALIZER_ENABLED.
	JobFinalizer bool
	// Workers reconcile in parallel, per kind: JANGAR_AGENTS_CONTROLLER_WORKERS.
	Workers int
	// AgentImage runs a run whose AgentRun and Agent name no image: JANGAR_AGENT_IMAGE (the
	// seeds' runtime.*; the chart sets the project's example agent, agentplane/agent). Empty:
	// such a run fails InvalidSpec.
	AgentImage string
	// Policy is the admission policy: JANGAR_AGENTS_CONTROLLER_{IMAGES,LABELS}_* and BLOCKED_SECRETS.
	Policy Policy
	// Limits are the concurrency, queue and start-rate limits.
	Limits Limits
	// JobRefDelay is how long a run that claimed its start with the status Starting waits after
	// its Job's creation for the pod to run before its status records the Job (Pending,
	// JobCreated, jobRef); 0 is DefaultJobRefDelay. Not set from the environment: tests set it.
	JobRefDelay time.Duration
}

// DefaultJobRefDelay is Config.JobRefDelay's default. A pod that runs within it takes its run
// from Starting to Running in one status write (the jobRef goes with Running): on a node that
// has the image, most do. The jobRef is what job-gc checks for a Job deleted before it ran
// (WorkflowJobMissing), so that check starts this much later.
const DefaultJobRefDelay = 5 * time.Second

// Policy is the seeds' admission policy for runs. Patterns use path.Match syntax
// (registry.example.com/agents/*); label entries are label keys.
type Policy struct {
	ImagesAllowed  []string
	ImagesDenied   []string
	LabelsRequired []string
	LabelsAllowed  []string
	LabelsDenied   []string
	BlockedSecrets []string
	// UnrecordedRuns: what a run without the API server's admission record may name beyond its
	// Agent's lists: UnrecordedRefuse (nothing) or UnrecordedAllow (anything, as before the
	// admission policies). JANGAR_AGENTS_CONTROLLER_UNRECORDED_RUNS.
	UnrecordedRuns string
}

// Values of JANGAR_AGENTS_CONTROLLER_UNRECORDED_RUNS.
const (
	UnrecordedRefuse = "refuse"
	UnrecordedAllow  = "allow"
)

// Limits bound how many runs run and wait. Zero means no limit.
type Limits struct {
	// Runs that may run at once, per namespace, per Agent and in the whole cluster.
	ConcurrencyNamespace, ConcurrencyAgent, ConcurrencyCluster int
	// Runs that may wait for a slot, per namespace, per repository and in the whole cluster; a
	// run that would wait beyond it fails with reason QueueFull.
	QueueNamespace, QueueRepo, QueueCluster int
	// Runs that may start within RateWindow, per namespace, per repository and in the cluster.
	RateWindow                           time.Duration
	RateNamespace, RateRepo, RateCluster int
}

// Any reports whether any limit is set.
func (l Limits) Any() bool {
	return l.ConcurrencyNamespace+l.ConcurrencyAgent+l.ConcurrencyCluster+l.QueueNamespace+l.QueueRepo+
		l.QueueCluster+l.RateNamespace+l.RateRepo+l.RateCluster > 0
}

// The environment variables, by name, so that the chart test can find them.
const (
	envJobTTL         = "JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS"
	envJobFinalizer   = "JANGAR_AGENT_RUNNER_JOB_FINALIZER_ENABLED"
	envWorkers        = "JANGAR_AGENTS_CONTROLLER_WORKERS"
	envAgentImage     = "JANGAR_AGENT_IMAGE"
	envImagesAllowed  = "JANGAR_AGENTS_CONTROLLER_IMAGES_ALLOWED"
	envImagesDenied   = "JANGAR_AGENTS_CONTROLLER_IMAGES_DENIED"
	envLabelsReq      = "JANGAR_AGENTS_CONTROLLER_LABELS_REQUIRED"
	envLabelsAllowed  = "JANGAR_AGENTS_CONTROLLER_LABELS_ALLOWED"
	envLabelsDenied   = "JANGAR_AGENTS_CONTROLLER_LABELS_DENIED"
	envBlockedSecret  = "JANGAR_AGENTS_CONTROLLER_BLOCKED_SECRETS" //nolint:gosec // G101: a variable's name, not a credential
	EnvUnrecordedRuns = "JANGAR_AGENTS_CONTROLLER_UNRECORDED_RUNS"
	EnvConcNS         = "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_NAMESPACE"
	EnvConcAgent      = "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_AGENT"
	EnvConcCluster    = "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_CLUSTER"
	EnvQueueNS        = "JANGAR_AGENTS_CONTROLLER_QUEUE_NAMESPACE"
	EnvQueueRepo      = "JANGAR_AGENTS_CONTROLLER_QUEUE_REPO"
	EnvQueueCluster   = "JANGAR_AGENTS_CONTROLLER_QUEUE_CLUSTER"
	EnvRateWindow     = "JANGAR_AGENTS_CONTROLLER_RATE_WINDOW_SECONDS"
	EnvRateNS         = "JANGAR_AGENTS_CONTROLLER_RATE_NAMESPACE"
	EnvRateRepo       = "JANGAR_AGENTS_CONTROLLER_RATE_REPO"
	EnvRateCluster    = "JANGAR_AGENTS_CONTROLLER_RATE_CLUSTER"
)

// LoadConfig reads the controller's settings; every bad value is reported at once, by name.
func LoadConfig(env *config.Env, svc config.Service) (Config, error) {
	c := Config{Namespaces: svc.Namespaces}
	if len(c.Namespaces) == 0 {
		c.Namespaces = []string{svc.PodNamespace}
	}
	nonNeg := func(name string, def int) int {
		v := env.Int(name, def)
		if v < 0 {
			env.Fail(name, fmt.Sprint(v), "a whole number of 0 or more (0: no limit)")
		}
		return v
	}
	ttl := nonNeg(envJobTTL, 600)
	c.JobTTLSeconds = int32(min(ttl, 1<<31-1)) //nolint:gosec // G115: bounded to int32 by the min
	c.JobFinalizer = env.Bool(envJobFinalizer, true)
	c.Workers = env.Int(envWorkers, 4)
	c.AgentImage = strings.TrimSpace(env.String(envAgentImage, ""))
	if c.Workers < 1 || c.Workers > 256 {
		env.Fail(envWorkers, fmt.Sprint(c.Workers), "between 1 and 256")
	}
	c.Policy = Policy{
		ImagesAllowed:  env.List(envImagesAllowed, nil),
		ImagesDenied:   env.List(envImagesDenied, nil),
		LabelsRequired: env.List(envLabelsReq, nil),
		LabelsAllowed:  env.List(envLabelsAllowed, nil),
		LabelsDenied:   env.List(envLabelsDenied, nil),
		BlockedSecrets: env.List(envBlockedSecret, nil),
		UnrecordedRuns: env.String(EnvUnrecordedRuns, UnrecordedRefuse),
	}
	if u := c.Policy.UnrecordedRuns; u != UnrecordedRefuse && u != UnrecordedAllow {
		env.Fail(EnvUnrecordedRuns, u, UnrecordedRefuse+" or "+UnrecordedAllow)
	}
	for name, pats := range map[string][]string{envImagesAllowed: c.Policy.ImagesAllowed, envImagesDenied: c.Policy.ImagesDenied} {
		for _, p := range pats {
			if _, err := path.Match(p, ""); err != nil {
				env.Fail(name, p, "image patterns in path.Match syntax, e.g. registry.example.com/agents/*")
			}
		}
	}
	c.Limits = Limits{
		ConcurrencyNamespace: nonNeg(EnvConcNS, 0), ConcurrencyAgent: nonNeg(EnvConcAgent, 0),
		ConcurrencyCluster: nonNeg(EnvConcCluster, 0),
		QueueNamespace:     nonNeg(EnvQueueNS, 0), QueueRepo: nonNeg(EnvQueueRepo, 0), QueueCluster: nonNeg(EnvQueueCluster, 0),
		RateNamespace: nonNeg(EnvRateNS, 0), RateRepo: nonNeg(EnvRateRepo, 0), RateCluster: nonNeg(EnvRateCluster, 0),
	}
	window := nonNeg(EnvRateWindow, 60)
	if window == 0 && c.Limits.RateNamespace+c.Limits.RateRepo+c.Limits.RateCluster > 0 {
		env.Fail(EnvRateWindow, "0", "at least 1 second when a RATE_* limit is set")
	}
	c.Limits.RateWindow = time.Duration(window) * time.Second
	if err := env.Err(); err != nil {
		return c, fmt.Errorf("run-controller: %w", err)
	}
	return c, nil
}

func describeList(l []string) string { return strings.Join(l, ", ") }
