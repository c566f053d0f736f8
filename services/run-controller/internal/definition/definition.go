// Package definition is run-controller's reconciler of what runs name: Agents and Orchestrations
// get seed 000's status through status-writer (#32 item 6): observedGeneration (the generation
// checked), updatedAt (set by status-writer on every write) and a Ready condition, True with
// reason Valid when runs of it can start, False with the reason and what to fix when every run of
// it would be refused: InvalidSpec (an Orchestration whose steps have a cycle, a duplicate name,
// an unknown dependency or kind) or Forbidden (an Agent whose default image run-controller's
// image policy refuses). A status already saying so is not written again.
package definition

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
	"github.com/agentplane/agentplane/services/run-controller/internal/orchestrationrun"
)

// ReasonValid is the Ready condition's reason when runs of the definition can start.
const ReasonValid = "Valid"

// Reconciler writes Agents' and Orchestrations' status.
type Reconciler struct{ *core.Core }

// New returns the reconciler on c's caches and writers.
func New(c *core.Core) *Reconciler { return &Reconciler{Core: c} }

// Agent reconciles the Agent named by key ("<namespace>/<name>").
func (c *Reconciler) Agent(ctx context.Context, key string) (core.Result, error) {
	ns, name := scaffold.SplitKey(key)
	a, ok := c.Core.Agent(ns, name)
	if !ok || a.DeletionTimestamp != nil {
		return core.Result{}, nil
	}
	ready := core.C(reasons.CondReady, metav1.ConditionTrue, ReasonValid, "runs of this Agent are accepted")
	if d := a.Spec.Defaults; d != nil && d.Image != "" {
		if err := c.Cfg.Policy.CheckImage(d.Image); err != nil {
			ready = core.C(reasons.CondReady, metav1.ConditionFalse, reasons.Forbidden, fmt.Sprintf(
				"spec.defaults.image: %v; runs that name no image of their own are refused", err))
		}
	}
	if a.Status.ObservedGeneration == a.Generation && core.CondsSay(a.Status.Conditions, []core.Cond{ready}) {
		return core.Result{}, nil
	}
	return core.Result{}, c.WriteStatus(ctx, "Agent", ns, name, string(a.UID), a.Generation, "", "", "", []core.Cond{ready}, nil)
}

// Orchestration reconciles the Orchestration named by key ("<namespace>/<name>").
func (c *Reconciler) Orchestration(ctx context.Context, key string) (core.Result, error) {
	ns, name := scaffold.SplitKey(key)
	o, ok := c.Core.Orchestration(ns, name)
	if !ok || o.DeletionTimestamp != nil {
		return core.Result{}, nil
	}
	ready := core.C(reasons.CondReady, metav1.ConditionTrue, ReasonValid, fmt.Sprintf("%d step(s); runs of this Orchestration are accepted", len(o.Spec.Steps)))
	if err := orchestrationrun.Validate(o.Spec.Steps); err != nil {
		ready = core.C(reasons.CondReady, metav1.ConditionFalse, reasons.InvalidSpec, fmt.Sprintf("%v; every run of it fails with InvalidSpec", err))
	}
	if o.Status.ObservedGeneration == o.Generation && core.CondsSay(o.Status.Conditions, []core.Cond{ready}) {
		return core.Result{}, nil
	}
	return core.Result{}, c.WriteStatus(ctx, "Orchestration", ns, name, string(o.UID), o.Generation, "", "", "", []core.Cond{ready}, nil)
}
