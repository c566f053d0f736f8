//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestCancelOffMeansOff (#32 item 1, seed 003's rollback): on a real API server with
// agentplane-crds' admission policies, a new spec.cancel on an AgentRun or OrchestrationRun (set on
// an existing run, or given at creation) is accepted only in a namespace where cancel-propagator's
// chart is installed with cancel on. With the chart not installed, installed for another
// namespace, upgraded to cancel.enabled=false or to env.vars.JANGAR_ORCHESTRATION_CANCEL_ENABLED=
// false, or uninstalled, it is refused with a message saying cancel is disabled; every other change
// to a run, and a run already cancelled, is still admitted. The one-release chart installs the
// switch only with cancel-propagator.
func TestCancelOffMeansOff(t *testing.T) {
	h := newHelmEnv(t)
	kube, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Stop() })
	ctx := context.Background()
	// StartKube turns cancel on cluster-wide, as most tests want; here nothing is installed yet.
	if err := kube.TurnCancelOff(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err := versioned.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"agents", "elsewhere"} {
		if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	n := 0
	// cancel creates an AgentRun and an OrchestrationRun in ns, sets spec.cancel on each (a merge
	// patch, as kubectl and agentctl do), and creates one more AgentRun with spec.cancel already
	// true. It returns each request's error, nil for one admitted.
	cancel := func(ns string) []error {
		n++
		name := fmt.Sprintf("run-%d", n)
		ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob}}}
		or := &orchestrationv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "pipeline"}}}
		if _, err := cs.AgentsV1alpha1().AgentRuns(ns).Create(ctx, ar, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create AgentRun %s/%s: %v", ns, name, err)
		}
		if _, err := cs.OrchestrationV1alpha1().OrchestrationRuns(ns).Create(ctx, or, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create OrchestrationRun %s/%s: %v", ns, name, err)
		}
		patch := []byte(`{"spec":{"cancel":true}}`)
		_, errAR := cs.AgentsV1alpha1().AgentRuns(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		_, errOR := cs.OrchestrationV1alpha1().OrchestrationRuns(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		born := ar.DeepCopy()
		born.Name, born.Spec.Cancel = name+"-born-cancelled", true
		_, errBorn := cs.AgentsV1alpha1().AgentRuns(ns).Create(ctx, born, metav1.CreateOptions{})
		return []error{errAR, errOR, errBorn}
	}
	// The switch is RBAC, which reaches the admission plugin's authorizer within seconds: each
	// state is polled for, and must then hold for every request.
	wantRefused := func(ns, why string) {
		t.Helper()
		eventually(t, 30*time.Second, "a new cancel refused in "+ns+" ("+why+")", func() error {
			for i, err := range cancel(ns) {
				want := "cancel is disabled for " + []string{"agentruns", "orchestrationruns", "agentruns"}[i] + " in namespace " + ns
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "JANGAR_ORCHESTRATION_CANCEL_ENABLED=false") {
					return fmt.Errorf("request %d: got %v, want a refusal saying %q", i, err, want)
				}
			}
			return nil
		})
	}
	wantAccepted := func(ns, why string) {
		t.Helper()
		eventually(t, 30*time.Second, "a new cancel accepted in "+ns+" ("+why+")", func() error {
			return errors.Join(cancel(ns)...)
		})
	}
	helm := func(args ...string) {
		t.Helper()
		args = append(args, "--kubeconfig", kube.Kubeconfig)
		if out, errOut, err := h.run(args...); err != nil {
			t.Fatalf("helm %v: %v\n%s%s", args, err, out, errOut)
		}
	}
	const chart = "charts/cancel-propagator"

	wantRefused("agents", "cancel-propagator not installed")
	helm("install", "cancel-propagator", chart, "--namespace", "agents")
	wantAccepted("agents", "installed with cancel on")
	wantRefused("elsewhere", "installed for namespace agents only")
	helm("upgrade", "cancel-propagator", chart, "--namespace", "agents", "--set", "cancel.enabled=false")
	wantRefused("agents", "cancel.enabled=false")
	helm("upgrade", "cancel-propagator", chart, "--namespace", "agents", "--set", "env.vars.JANGAR_ORCHESTRATION_CANCEL_ENABLED=false")
	wantRefused("agents", "env.vars.JANGAR_ORCHESTRATION_CANCEL_ENABLED=false")
	helm("upgrade", "cancel-propagator", chart, "--namespace", "agents", "--set", "controller.namespaces={agents,elsewhere}")
	wantAccepted("elsewhere", "installed for both namespaces")
	cancelled := fmt.Sprintf("run-%d", n) // its cancel was accepted
	helm("uninstall", "cancel-propagator", "--namespace", "agents")
	wantRefused("elsewhere", "uninstalled")

	t.Run("with cancel off, other changes and runs already cancelled are still admitted", func(t *testing.T) {
		label := []byte(`{"metadata":{"labels":{"team":"a"}}}`)
		if _, err := cs.AgentsV1alpha1().AgentRuns("elsewhere").Patch(ctx, cancelled, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			t.Errorf("labelling a cancelled AgentRun: %v", err)
		}
		if _, err := cs.OrchestrationV1alpha1().OrchestrationRuns("elsewhere").Patch(ctx, cancelled, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			t.Errorf("labelling a cancelled OrchestrationRun: %v", err)
		}
		again := []byte(`{"spec":{"cancel":true}}`)
		if _, err := cs.AgentsV1alpha1().AgentRuns("elsewhere").Patch(ctx, cancelled, types.MergePatchType, again, metav1.PatchOptions{}); err != nil {
			t.Errorf("cancelling an already cancelled AgentRun again (no change): %v", err)
		}
		ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "not-cancelled"},
			Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob}}}
		if _, err := cs.AgentsV1alpha1().AgentRuns("elsewhere").Create(ctx, ar, metav1.CreateOptions{}); err != nil {
			t.Errorf("creating a run without cancel: %v", err)
		}
	})

	t.Run("the one-release chart grants the switch only with cancel-propagator", func(t *testing.T) {
		switches := func(flags ...string) []string {
			var out []string
			for _, o := range h.template(t, "agentplane", flags...) {
				if strings.HasSuffix(o.Metadata.Name, "cancel-switch") && strings.HasPrefix(o.Kind, "Role") {
					out = append(out, o.String())
				}
			}
			return out
		}
		if got := switches(); len(got) != 2 {
			t.Errorf("default install: cancel switch objects %v, want a Role and a RoleBinding", got)
		}
		for _, flags := range [][]string{{"--set", "cancel-propagator.enabled=false"}, {"--set", "global.controllers.enabled=false"},
			{"--set", "cancel-propagator.cancel.enabled=false"}, {"--set", "global.controllers.env.vars.JANGAR_ORCHESTRATION_CANCEL_ENABLED=off"},
			{"--set", "cancel-propagator.controllers.env.vars.JANGAR_ORCHESTRATION_CANCEL_ENABLED=off"}} {
			if got := switches(flags...); len(got) != 0 {
				t.Errorf("%v: cancel switch objects %v, want none", flags, got)
			}
		}
	})
}
