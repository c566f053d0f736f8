package health

import (
	"errors"
	"strings"
	"testing"
)

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

func allCRDs() map[string]bool {
	m := map[string]bool{}
	for _, c := range CRDs {
		m[c] = true
	}
	return m
}

func find(items []Item, component string) Item {
	for _, it := range items {
		if it.Component == component {
			return it
		}
	}
	return Item{}
}

func TestCompute(t *testing.T) {
	base := func() Observation {
		return Observation{
			Namespace: "agents", NamespaceFound: yes(), CRDsEstablished: allCRDs(), WorkflowCRD: no(), JobAPI: yes(),
			RedisAddress: "redis:6379", GRPCAddress: "127.0.0.1:50051",
			Services: []Service{
				{Name: "status-writer", Deployment: true, Desired: 2, Ready: 2, Health: "SERVING"},
				{Name: "event-emitter", Deployment: true, Desired: 1, Ready: 1, Health: "SERVING", Subsystems: map[string]string{"agentplane.v1.EventEmitter/redis": "SERVING"}},
			},
		}
	}
	cases := []struct {
		name      string
		mutate    func(*Observation)
		component string
		status    Status
		msgHas    string
	}{
		{"all well", func(*Observation) {}, "status-writer", Healthy, ""},
		{"namespace missing", func(o *Observation) { o.NamespaceFound = no() }, ComponentNamespace, Error, "not found"},
		{"crd missing", func(o *Observation) { delete(o.CRDsEstablished, CRDs[0]) }, ComponentCRDs, Error, CRDs[0]},
		{"crd not established", func(o *Observation) { o.CRDsEstablished[CRDs[1]] = false }, ComponentCRDs, Degraded, "not established"},
		{"replicas short", func(o *Observation) { o.Services[0].Ready = 1 }, "status-writer", Degraded, "1/2 replicas ready"},
		{"no replicas", func(o *Observation) { o.Services[0].Ready = 0 }, "status-writer", Error, "0/2"},
		{"not serving", func(o *Observation) { o.Services[0].Health = "NOT_SERVING" }, "status-writer", Error, "not serving"},
		{"subsystem down", func(o *Observation) { o.Services[1].Subsystems["agentplane.v1.EventEmitter/redis"] = "NOT_SERVING" }, "event-emitter", Degraded, "redis"},
		{"pods crash, none ready", func(o *Observation) {
			o.Services[0].Ready = 0
			o.Services[0].PodProblems = []string{"status-writer-a: CrashLoopBackOff", "status-writer-b: CrashLoopBackOff"}
		}, "status-writer", Error, "0/2 replicas ready: status-writer-a: CrashLoopBackOff, status-writer-b"},
		{"one pod crashes, still ready", func(o *Observation) {
			o.Services[0].PodProblems = []string{"status-writer-b: OOMKilled"}
		}, "status-writer", Degraded, "status-writer-b: OOMKilled"},
		{"many pod problems are cut", func(o *Observation) {
			o.Services[0].PodProblems = []string{"a: x", "b: x", "c: x", "d: x", "e: x"}
		}, "status-writer", Degraded, "c: x and 2 more"},
		{"local process, serving", func(o *Observation) { o.Services[0] = Service{Name: "status-writer", Health: "SERVING"} }, "status-writer", Healthy, ""},
		{"local process, unreachable", func(o *Observation) { o.Services[0] = Service{Name: "status-writer", Health: "UNREACHABLE"} }, "status-writer", Error, "unreachable"},
		{"redis down", func(o *Observation) { o.RedisErr = errors.New("dial tcp: connection refused") }, ComponentDatabase, Degraded, "refused"},
		{"no secret in a message", func(o *Observation) {
			o.RedisErr = errors.New("dial redis://:hunter2hunter2@redis:6379: refused")
		}, ComponentDatabase, Degraded, "[REDACTED]"},
		{"api server down", func(o *Observation) { o.APIServerErr = errors.New("connection refused") }, ComponentAPIServer, Error, "refused"},
		{"api server not ready", func(o *Observation) { o.APIServerProbeErr = errors.New("connection refused") }, ComponentAPIServer, Error, "not ready: connection refused"},
		// run-controller runs no temporal or custom runs, whatever is configured (#32 item 9).
		{"temporal configured, still not run", func(o *Observation) { o.TemporalAddress = "temporal:7233" }, RuntimeTemporal, Unknown, "not supported"},
		{"custom runtime, not run", func(*Observation) {}, RuntimeCustom, Unknown, "fails with InvalidSpec"},
		// The workflow runtime is Jobs, one per step: Argo's absence does not matter.
		{"workflow without Argo", func(o *Observation) { o.WorkflowCRD = no() }, RuntimeWorkflow, Healthy, "one batch/v1 Job per step"},
		{"workflow without Jobs", func(o *Observation) { o.JobAPI = no() }, RuntimeWorkflow, Error, "not served"},
		{"grpc", func(*Observation) {}, ComponentGRPC, Healthy, "127.0.0.1:50051"},
		// agentctl's kube mode observes neither; it says so rather than "not configured" (#32 item 9).
		{"a client's redis, unseen", func(o *Observation) { o.Client, o.Services = true, nil }, ComponentDatabase, Unknown, "watch-gateway reports it"},
		{"a client's grpc, unseen", func(o *Observation) { o.Client, o.Services = true, nil }, ComponentGRPC, Unknown, "agentctl status --transport grpc"},
		{"a client's redis, through event-emitter", func(o *Observation) {
			o.Client = true
			o.Services = append(o.Services, Service{Name: "event-emitter", Health: "SERVING", Subsystems: map[string]string{"agentplane.v1.EventEmitter/redis": "SERVING"}})
		}, ComponentDatabase, Healthy, "event-emitter's Redis check"},
		{"a client's redis down, through event-emitter", func(o *Observation) {
			o.Client = true
			o.Services = append(o.Services, Service{Name: "event-emitter", Health: "SERVING", Subsystems: map[string]string{"agentplane.v1.EventEmitter/redis": "NOT_SERVING"}})
		}, ComponentDatabase, Degraded, "NOT_SERVING"},
		{"a client's grpc, through the gateway's health", func(o *Observation) {
			o.Client = true
			o.Services = append(o.Services, Service{Name: "watch-gateway", Health: "SERVING"})
		}, ComponentGRPC, Healthy, "watch-gateway serves gRPC"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.mutate(&o)
			it := find(Compute(o), tc.component)
			if it.Status != tc.status || !strings.Contains(it.Message, tc.msgHas) {
				t.Fatalf("%s = %+v, want %s with %q", tc.component, it, tc.status, tc.msgHas)
			}
			if strings.Contains(it.Message, "hunter2") {
				t.Fatalf("secret in message: %q", it.Message)
			}
		})
	}
}

func TestComputeOrderAndCRDDetails(t *testing.T) {
	items := Compute(Observation{Namespace: "agents", NamespaceFound: yes(), CRDsEstablished: map[string]bool{CRDs[0]: true},
		Services: []Service{{Name: "watch-gateway", Health: "SERVING"}, {Name: "event-emitter", Health: "SERVING"}}})
	var order []string
	for _, it := range items {
		order = append(order, it.Component)
	}
	want := "namespace kube-apiserver crds event-emitter watch-gateway runtime:workflow runtime:job runtime:temporal runtime:custom database grpc"
	if strings.Join(order, " ") != want {
		t.Fatalf("order = %v", order)
	}
	d := find(items, ComponentCRDs).Details
	if d["crds_ready"] != false || len(d["missing_crds"].([]any)) != 3 {
		t.Fatalf("details = %v", d)
	}
}

func TestDiff(t *testing.T) {
	a := []Item{{Component: "x", Status: Healthy}, {Component: "y", Status: Healthy}, {Component: "gone", Status: Healthy}}
	b := []Item{{Component: "x", Status: Healthy}, {Component: "y", Status: Degraded, Message: "m"}, {Component: "new", Status: Unknown}}
	d := Diff(a, b)
	if len(d) != 3 || d[0].Component != "y" || d[1].Component != "new" || d[2].Component != "gone" || d[2].Status != Unknown {
		t.Fatalf("diff = %+v", d)
	}
	if len(Diff(b, b)) != 0 {
		t.Fatal("no change must give no delta")
	}
}
