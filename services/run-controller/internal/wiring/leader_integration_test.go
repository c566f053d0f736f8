//go:build integration

package wiring

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/testenv"
)

// Two run-controller processes with leader election: only the leader acts; killing it (SIGKILL:
// no lease released) mid-flow lets the other finish every run, with no duplicate Job.
func TestLeaderElectionOnlyTheLeaderActsAndTheOtherTakesOver(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	start := func(id string) *testenv.Service {
		s, err := testenv.StartService(binDir+"/run-controller", t.TempDir(),
			"KUBECONFIG="+env.Kubeconfig, "POD_NAMESPACE="+ns, "POD_NAME="+id, "JANGAR_AGENTS_CONTROLLER_NAMESPACES="+ns,
			"JANGAR_LEADER_ELECTION_ENABLED=true", "JANGAR_LEADER_ELECTION_LEASE_DURATION=3s",
			"JANGAR_LEADER_ELECTION_RENEW_DEADLINE=2s", "JANGAR_LEADER_ELECTION_RETRY_PERIOD=500ms",
			"JANGAR_STATUS_WRITER_ADDR="+swAddr, "JANGAR_EVENT_EMITTER_ADDR="+evAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !s.Exited() {
				s.Stop()
			}
		})
		return s
	}
	procs := map[string]*testenv.Service{"rc-a": start("rc-a"), "rc-b": start("rc-b")}
	holder := func() string {
		l, err := kc.CoordinationV1().Leases(ns).Get(context.Background(), "agentplane-run-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var leader string
	testenv.Eventually(t, 20*time.Second, "a leader", func() error {
		if leader = holder(); leader == "" {
			return fmt.Errorf("no holder")
		}
		return nil
	})
	follower := "rc-a"
	if leader == "rc-a" {
		follower = "rc-b"
	}
	recorded := func(names ...string) error {
		for _, n := range names {
			if ar := getRun(t, ns, n); ar.Status.JobRef == nil {
				return fmt.Errorf("%s has no Job yet: %+v", n, ar.Status)
			}
		}
		return nil
	}
	var first, second []string
	for i := range 10 {
		first = append(first, fmt.Sprintf("a%02d", i))
		second = append(second, fmt.Sprintf("b%02d", i))
	}
	for _, n := range first {
		create(t, "agentruns", ns, jobRun(ns, n, "codex"))
	}
	testenv.Eventually(t, 30*time.Second, "the leader starts the first runs", func() error {
		if ar := getRun(t, ns, first[0]); ar.Status.JobRef == nil {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if strings.Contains(procs[follower].Log(), "caches synced") {
		t.Fatalf("the follower %s reconciles too:\n%s", follower, procs[follower].Log())
	}
	procs[leader].Kill()
	for _, n := range second {
		create(t, "agentruns", ns, jobRun(ns, n, "codex"))
	}
	testenv.Eventually(t, 30*time.Second, "the other replica finishes every run", func() error { return recorded(append(first, second...)...) })
	if h := holder(); h != follower {
		t.Errorf("lease holder %q, want %s", h, follower)
	}
	jobs := jobsIn(t, ns)
	per := map[string]int{}
	for _, j := range jobs {
		per[j.Labels["agents.proompteng.ai/agent-run"]]++
	}
	if len(jobs) != 20 || len(per) != 20 {
		t.Fatalf("%d Jobs for 20 runs: %v", len(jobs), per)
	}
}
