//go:build integration

package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// TestAgentsAndOrchestrationsGetSeed000Status (#32 item 6): every Agent and Orchestration gets,
// through status-writer, observedGeneration (following each spec change), updatedAt and a Ready
// condition: True (Valid) when runs of it can start, False with InvalidSpec for an Orchestration
// whose steps form a cycle, and Forbidden for an Agent whose default image the controller's
// policy refuses.
func TestAgentsAndOrchestrationsGetSeed000Status(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	createAgent(t, ns, "denied", func(a *agentsv1alpha1.Agent) {
		a.Spec.Defaults = &agentsv1alpha1.AgentRunDefaults{Image: "docker.io/agent:1"}
	})
	create(t, "orchestrations", ns, orchestration(ns, "pipeline", step("a"), step("b", "a")))
	create(t, "orchestrations", ns, orchestration(ns, "loop", step("x", "y"), step("y", "x")))
	startController(t, ns, func(c *core.Config) { c.Policy = core.Policy{ImagesDenied: []string{"docker.io/*"}} })
	ctx := context.Background()
	arc, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	orc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	// want reads an object's generation and status and checks them against the Ready condition.
	want := func(kind, name string, status metav1.ConditionStatus, reason string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, kind+" "+name+" Ready="+string(status)+" "+reason, func() error {
			var gen, observed int64
			var updated *metav1.MicroTime
			var conds []metav1.Condition
			if kind == "Agent" {
				a := &agentsv1alpha1.Agent{}
				if err := arc.Get().Namespace(ns).Resource("agents").Name(name).Do(ctx).Into(a); err != nil {
					return err
				}
				gen, observed, updated, conds = a.Generation, a.Status.ObservedGeneration, a.Status.UpdatedAt, a.Status.Conditions
			} else {
				o := &orchv1alpha1.Orchestration{}
				if err := orc.Get().Namespace(ns).Resource("orchestrations").Name(name).Do(ctx).Into(o); err != nil {
					return err
				}
				gen, observed, updated, conds = o.Generation, o.Status.ObservedGeneration, o.Status.UpdatedAt, o.Status.Conditions
			}
			c := condition(conds, reasons.CondReady)
			switch {
			case observed != gen:
				return fmt.Errorf("observedGeneration %d, generation %d", observed, gen)
			case updated == nil:
				return fmt.Errorf("no updatedAt")
			case c == nil || c.Status != status || c.Reason != reason:
				return fmt.Errorf("Ready %+v", c)
			}
			return nil
		})
	}
	want("Agent", "codex", metav1.ConditionTrue, "Valid")
	want("Agent", "denied", metav1.ConditionFalse, reasons.Forbidden)
	want("Orchestration", "pipeline", metav1.ConditionTrue, "Valid")
	want("Orchestration", "loop", metav1.ConditionFalse, reasons.InvalidSpec)

	// A spec change: observedGeneration follows, and Ready follows the new spec.
	if err := arc.Patch(types.MergePatchType).Namespace(ns).Resource("agents").Name("denied").
		Body([]byte(`{"spec":{"defaults":{"image":"registry.example.com/agent:1"}}}`)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	want("Agent", "denied", metav1.ConditionTrue, "Valid")
	if err := orc.Patch(types.MergePatchType).Namespace(ns).Resource("orchestrations").Name("loop").
		Body([]byte(`{"spec":{"steps":[{"name":"x","kind":"AgentRun","agentRef":{"name":"codex"}},{"name":"y","kind":"AgentRun","agentRef":{"name":"codex"},"dependsOn":["x"]}]}}`)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	want("Orchestration", "loop", metav1.ConditionTrue, "Valid")
}
