// Package health is agentplane's one control-plane health model (seed 004), used by
// watch-gateway and by agentctl's kube mode: the components, how an observation of the cluster
// maps to each one's status, and the stream of snapshots, deltas and heartbeats with resumable
// cursors.
package health

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/agentplane/agentplane/libs/redact"
)

// Status is a component's health.
type Status string

const (
	Healthy    Status = "healthy"
	Degraded   Status = "degraded"
	Unknown    Status = "unknown"
	Error      Status = "error"
	Configured Status = "configured"
)

// Item is one component's health, as the seed's status item.
type Item struct {
	Component string         `json:"component"`
	Namespace string         `json:"namespace,omitempty"`
	Status    Status         `json:"status"`
	Message   string         `json:"message"`
	Details   map[string]any `json:"details,omitempty"`
}

// Components that are not services, in display order; services come between "namespace" and
// the runtimes, sorted by name, whatever services are deployed.
const (
	ComponentNamespace = "namespace"
	ComponentAPIServer = "kube-apiserver"
	ComponentCRDs      = "crds"
	ComponentDatabase  = "database"
	ComponentGRPC      = "grpc"
	RuntimeWorkflow    = "runtime:workflow"
	RuntimeJob         = "runtime:job"
	RuntimeTemporal    = "runtime:temporal"
	RuntimeCustom      = "runtime:custom"
)

// CRDs are the custom resources the control plane needs.
var CRDs = []string{
	"agentruns.agents.proompteng.ai",
	"agents.agents.proompteng.ai",
	"orchestrationruns.orchestration.proompteng.ai",
	"orchestrations.orchestration.proompteng.ai",
}

// Observation is what was seen of the cluster at one moment. Zero values mean "not observed".
type Observation struct {
	Namespace      string
	NamespaceFound *bool
	APIServerErr   error
	// APIServerProbeErr is the last /readyz probe's error: a short outage that no watch noticed
	// (a watch can ride out a restart on its connection) still shows.
	APIServerProbeErr error
	// CRDsEstablished maps each CRD name found to whether it is Established; nil: not observed.
	CRDsEstablished map[string]bool
	Services        []Service
	// WorkflowCRD is whether Argo's workflows.argoproj.io is installed; nil: not observed.
	WorkflowCRD *bool
	// JobAPI is whether batch/v1 Jobs are served; nil: not observed.
	JobAPI *bool
	// TemporalAddress is the configured Temporal endpoint, if any.
	TemporalAddress string
	// Redis: configured address (empty: not configured) and the last ping's error.
	RedisAddress string
	RedisErr     error
	// GRPCAddress is where the reporting gateway serves gRPC (empty: not serving).
	GRPCAddress string
	// Client: computed by a client (agentctl's kube mode), which observes neither the gateway's
	// Redis nor its gRPC.
	Client bool
}

// Service is one agentplane service, discovered by its Deployment's part-of label, so a new
// service appears without code changes.
type Service struct {
	Name string
	// Desired and Ready replicas of its Deployment; Deployment false when none was found
	// (a service run outside Kubernetes, as `make up` does).
	Deployment     bool
	Desired, Ready int32
	// Health is its grpc.health.v1 status ("" when not watched): SERVING, NOT_SERVING, UNKNOWN,
	// SERVICE_UNKNOWN, or UNREACHABLE when the stream cannot be opened.
	Health string
	// Subsystems maps health service names the service exposes besides its own (for example
	// agentplane.v1.EventEmitter/redis) to their status.
	Subsystems map[string]string
	// PodProblems are what its Pods show that readiness alone does not say, one "pod: reason"
	// each (CrashLoopBackOff, ImagePullBackOff, OOMKilled, ...), sorted.
	PodProblems []string
}

// Compute maps an observation to the component list, in display order. Messages are redacted:
// an error from a client library may carry a credential.
func Compute(o Observation) []Item {
	ns := o.Namespace
	var items []Item
	add := func(component string, st Status, msg string, details map[string]any) {
		items = append(items, Item{Component: component, Namespace: ns, Status: st, Message: redact.String(msg), Details: details})
	}

	switch {
	case o.NamespaceFound == nil:
		add(ComponentNamespace, Unknown, "not observed yet", nil)
	case *o.NamespaceFound:
		add(ComponentNamespace, Healthy, "", nil)
	default:
		add(ComponentNamespace, Error, fmt.Sprintf("namespace %s not found", ns), nil)
	}
	if o.APIServerProbeErr != nil {
		add(ComponentAPIServer, Error, "not ready: "+o.APIServerProbeErr.Error(), nil)
	} else if o.APIServerErr != nil {
		add(ComponentAPIServer, Error, o.APIServerErr.Error(), nil)
	} else {
		add(ComponentAPIServer, Healthy, "", nil)
	}
	st, msg, details := crdStatus(o.CRDsEstablished)
	add(ComponentCRDs, st, msg, details)

	services := append([]Service(nil), o.Services...)
	sort.Slice(services, func(i, j int) bool { return services[i].Name < services[j].Name })
	for _, s := range services {
		st, msg := serviceStatus(s)
		add(s.Name, st, msg, nil)
	}

	// What run-controller runs: the job runtime (one Job) and the workflow runtime (one Job per
	// step; Argo Workflows are never used), both on batch/v1 Jobs. It runs no temporal or custom
	// runs: each fails with InvalidSpec, whatever is configured.
	switch {
	case o.JobAPI == nil:
		add(RuntimeWorkflow, Unknown, "not observed yet", nil)
		add(RuntimeJob, Unknown, "not observed yet", nil)
	case *o.JobAPI:
		add(RuntimeWorkflow, Healthy, "one batch/v1 Job per step", nil)
		add(RuntimeJob, Healthy, "", nil)
	default:
		add(RuntimeWorkflow, Error, "batch/v1 Jobs are not served (a workflow runs one Job per step)", nil)
		add(RuntimeJob, Error, "batch/v1 Jobs are not served", nil)
	}
	unsupported := "not supported: run-controller runs the job and workflow runtimes; a run of this runtime fails with InvalidSpec"
	add(RuntimeTemporal, Unknown, unsupported, nil)
	add(RuntimeCustom, Unknown, unsupported, nil)
	st, msg = databaseStatus(o)
	add(ComponentDatabase, st, msg, nil)
	st, msg = grpcStatus(o)
	add(ComponentGRPC, st, msg, nil)
	return items
}

// fromGateway is what a client says of what only watch-gateway observes.
const fromGateway = "not observed by agentctl's kube mode: watch-gateway reports it (agentctl status --transport grpc)"

// seenByClient is what a client (agentctl's kube mode) sees of Redis and of the gateway's gRPC:
// event-emitter's Redis health check and the gateway's own health, when it reaches them ("" when
// not).
func seenByClient(o Observation) (emitterRedis, gatewayHealth string) {
	for _, s := range o.Services {
		switch s.Name {
		case "event-emitter":
			for name, st := range s.Subsystems {
				if strings.HasSuffix(name, "/redis") {
					emitterRedis = st
				}
			}
		case "watch-gateway":
			gatewayHealth = s.Health
		}
	}
	return emitterRedis, gatewayHealth
}

func databaseStatus(o Observation) (Status, string) {
	redis, _ := seenByClient(o)
	switch {
	case o.Client && redis == "SERVING":
		return Healthy, "as event-emitter's Redis check reports"
	case o.Client && redis != "":
		return Degraded, "event-emitter's Redis check reports " + redis
	case o.Client:
		return Unknown, fromGateway
	case o.RedisAddress == "":
		return Unknown, "redis not configured"
	case o.RedisErr != nil:
		return Degraded, "redis unreachable: " + o.RedisErr.Error()
	}
	return Healthy, ""
}

func grpcStatus(o Observation) (Status, string) {
	_, gateway := seenByClient(o)
	switch {
	case o.Client && gateway == "SERVING":
		return Healthy, "watch-gateway serves gRPC (its health answered)"
	case o.Client:
		return Unknown, fromGateway
	case o.GRPCAddress != "":
		return Healthy, o.GRPCAddress
	}
	return Unknown, "gRPC not enabled"
}

func crdStatus(established map[string]bool) (Status, string, map[string]any) {
	if established == nil {
		return Unknown, "not observed yet", nil
	}
	var missing, pending []string
	for _, name := range CRDs {
		ok, found := established[name]
		switch {
		case !found:
			missing = append(missing, name)
		case !ok:
			pending = append(pending, name)
		}
	}
	details := map[string]any{"crds_ready": len(missing) == 0 && len(pending) == 0, "missing_crds": toAny(missing)}
	switch {
	case len(missing) > 0:
		return Error, "missing " + strings.Join(missing, ", ") + ": helm install agentplane-crds charts/agentplane-crds", details
	case len(pending) > 0:
		return Degraded, "not established yet: " + strings.Join(pending, ", "), details
	}
	return Healthy, "", details
}

func toAny(s []string) []any {
	out := make([]any, 0, len(s))
	for _, v := range s {
		out = append(out, v)
	}
	return out
}

// maxPodProblems bounds how many pod problems a message lists.
const maxPodProblems = 3

func podProblems(p []string) string {
	if len(p) <= maxPodProblems {
		return strings.Join(p, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(p[:maxPodProblems], ", "), len(p)-maxPodProblems)
}

func serviceStatus(s Service) (Status, string) {
	if s.Deployment && s.Desired > 0 && s.Ready == 0 {
		msg := fmt.Sprintf("0/%d replicas ready", s.Desired)
		if len(s.PodProblems) > 0 {
			msg += ": " + podProblems(s.PodProblems)
		}
		return Error, msg
	}
	switch s.Health {
	case "NOT_SERVING":
		return Error, "not serving"
	case "UNREACHABLE":
		if s.Deployment && s.Ready > 0 {
			return Degraded, "health stream unreachable"
		}
		return Error, "unreachable"
	case "", "UNKNOWN", "SERVICE_UNKNOWN":
		if !s.Deployment {
			return Unknown, "no health observed"
		}
	}
	var down []string
	for name, st := range s.Subsystems {
		if st != "SERVING" {
			down = append(down, name)
		}
	}
	sort.Strings(down)
	if len(down) > 0 {
		return Degraded, strings.Join(down, ", ") + " not serving"
	}
	if len(s.PodProblems) > 0 {
		return Degraded, podProblems(s.PodProblems)
	}
	if s.Deployment && s.Ready < s.Desired {
		return Degraded, fmt.Sprintf("%d/%d replicas ready", s.Ready, s.Desired)
	}
	return Healthy, ""
}

// Diff returns the items of next that are new or changed since prev, plus, for a component
// that disappeared, an unknown item saying so.
func Diff(prev, next []Item) []Item {
	old := map[string]Item{}
	for _, it := range prev {
		old[it.Component] = it
	}
	var out []Item
	seen := map[string]bool{}
	for _, it := range next {
		seen[it.Component] = true
		if p, ok := old[it.Component]; !ok || !reflect.DeepEqual(p, it) {
			out = append(out, it)
		}
	}
	for _, it := range prev {
		if !seen[it.Component] {
			out = append(out, Item{Component: it.Component, Namespace: it.Namespace, Status: Unknown, Message: "no longer reported"})
		}
	}
	return out
}
