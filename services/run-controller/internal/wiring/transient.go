package wiring

import (
	"context"
	"errors"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// transient wraps a run kind's reconcile with seed 001's condition for transient errors: a
// reconcile that fails (an error that is not a wait: the API server, the network, status-writer)
// sets Reconciled=False, reason ReconcileError, with the error; the next reconcile that succeeds
// sets Reconciled=True, reason Reconciled. Nothing is written while the condition already says so,
// so runs that never fail get no condition and no extra write. A failed condition write (status-
// writer is often what failed) is logged; the reconcile's own error is what is retried.
func (c *Controller) transient(kind string, reconcile scaffold.Reconciler) scaffold.Reconciler {
	return func(ctx context.Context, key string) (scaffold.Result, error) {
		res, err := reconcile(ctx, key)
		if scaffold.IsWaiting(err) {
			return res, err
		}
		ns, name := scaffold.SplitKey(key)
		var obj metav1.Object
		var conds []metav1.Condition
		var phase string
		switch kind {
		case "AgentRun":
			if ar, ok := c.Core.Run(ns, name); ok {
				obj, conds, phase = ar, ar.Status.Conditions, ar.Status.Phase
			}
		case "OrchestrationRun":
			if or, ok := c.OrchRun(ns, name); ok {
				obj, conds, phase = or, or.Status.Conditions, or.Status.Phase
			}
		}
		if obj == nil || obj.GetDeletionTimestamp() != nil {
			return res, err
		}
		cur := meta.FindStatusCondition(conds, reasons.CondReconciled)
		var want core.Cond
		switch {
		case err != nil:
			want = core.C(reasons.CondReconciled, metav1.ConditionFalse, reasons.ReconcileError, errorMessage(err))
			if cur != nil && cur.Status == want.Status && cur.Message == want.Message {
				return res, err
			}
		case cur != nil && cur.Status == metav1.ConditionFalse:
			want = core.C(reasons.CondReconciled, metav1.ConditionTrue, reasons.Reconciled, "the last reconcile succeeded")
		default:
			return res, err
		}
		// The phase and reason stay as they are (an empty phase keeps them): only the condition.
		gen := obj.GetGeneration()
		if werr := c.WriteStatus(ctx, kind, ns, name, string(obj.GetUID()), gen, "", "", "", []core.Cond{want}, nil); werr != nil {
			logging.FromContext(ctx).Warn("could not record the reconcile's outcome in the run's conditions",
				"kind", kind, "object", key, "phase", phase, "err", werr)
		}
		return res, err
	}
}

// errorMessage is what the condition says of err: a Problem's message (its reason is the
// condition's), else the error, cut to 1024 bytes at a rune boundary.
func errorMessage(err error) string {
	msg := err.Error()
	var p *core.Problem
	if errors.As(err, &p) {
		msg = p.Message
	}
	if len(msg) > 1024 {
		cut := 1024
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	return msg
}
