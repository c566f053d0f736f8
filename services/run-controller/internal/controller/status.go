package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

type cond struct {
	typ     string
	status  metav1.ConditionStatus
	reason  string
	message string
}

// runStatus is what the controller wants an AgentRun's status to say.
type runStatus struct {
	phase, reason, message string
	conds                  []cond
	jobRef                 *agentsv1alpha1.JobRef
	workflow               *agentsv1alpha1.WorkflowStatus
}

// setRunStatus writes st through status-writer unless the status already says it.
func (c *Controller) setRunStatus(ctx context.Context, ar *agentsv1alpha1.AgentRun, st runStatus) error {
	if runStatusSays(ar, st) {
		return nil
	}
	var fields proto.Message
	if st.jobRef != nil || st.workflow != nil {
		f, err := statusclient.AgentRunFields(st.jobRef, st.workflow)
		if err != nil {
			return fmt.Errorf("encode AgentRun %s/%s status fields: %w", ar.Namespace, ar.Name, err)
		}
		fields = f
	}
	return c.writeStatus(ctx, "AgentRun", ar.Namespace, ar.Name, string(ar.UID), ar.Generation, st.phase, st.reason, st.message, st.conds, fields)
}

// writeStatus writes an object's status through status-writer; fields are its kind's typed
// fields (nil: none). A write refused as stale (the object moved on) is a wait: the reconcile is
// retried with backoff and sees the newer object (statusclient.Outcome, the policy every
// controller shares).
func (c *Controller) writeStatus(ctx context.Context, kind, ns, name, uid string, gen int64, phase, reason, message string, conds []cond, fields proto.Message) error {
	req := &pb.WriteStatusRequest{
		Object:             &pb.ObjectRef{Kind: kind, Namespace: ns, Name: name, Uid: uid},
		ObservedGeneration: gen, Phase: phase, Reason: reason, Message: message,
	}
	for _, cd := range conds {
		req.Conditions = append(req.Conditions, &pb.Condition{Type: cd.typ, Status: string(cd.status), Reason: cd.reason, Message: cd.message})
	}
	statusclient.WithFields(req, fields)
	start := time.Now()
	_, err := c.d.Status.Write(ctx, req)
	c.d.Metrics.statusWrites.WithLabelValues(kind).Inc()
	err = statusclient.Outcome(err)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, statusclient.ErrStale):
		logging.FromContext(ctx).Info("status write refused by the contract; looking again",
			"kind", kind, "object", ns+"/"+name, "err", err, "took", time.Since(start))
		return scaffold.Waiting(err)
	default:
		return fmt.Errorf("write %s %s/%s status: %w", kind, ns, name, err)
	}
}

// runStatusSays reports whether the run's status already says st.
func runStatusSays(ar *agentsv1alpha1.AgentRun, st runStatus) bool {
	s := ar.Status
	if s.Phase != st.phase || s.Reason != st.reason || s.Message != st.message || s.ObservedGeneration != ar.Generation {
		return false
	}
	if st.jobRef != nil && (s.JobRef == nil || *s.JobRef != *st.jobRef) {
		return false
	}
	if st.workflow != nil && !sameJSON(s.Workflow, st.workflow) {
		return false
	}
	return condsSay(s.Conditions, st.conds)
}

func condsSay(have []metav1.Condition, want []cond) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.Type == w.typ {
				found = h.Status == w.status && h.Reason == w.reason && h.Message == w.message
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func sameJSON(a, b any) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return bytes.Equal(ra, rb)
}

// emit sends an event about obj through event-emitter. A failure is logged: events never hold
// up a reconcile.
func (c *Controller) emit(ctx context.Context, obj metav1.Object, typ, reason, action, note string, transient bool) {
	kind, apiVersion := "AgentRun", agentsGV.String()
	if _, ok := obj.(*orchv1alpha1.OrchestrationRun); ok {
		kind, apiVersion = "OrchestrationRun", orchGV.String()
	}
	req := eventclient.About(apiVersion, kind, obj, typ, reason, action, note)
	req.Transient = transient
	resp, err := c.d.Events.Emit(ctx, req)
	if err != nil {
		logging.FromContext(ctx).Warn("emit event", "reason", reason, "object", obj.GetNamespace()+"/"+obj.GetName(), "err", err)
		return
	}
	c.d.Metrics.events.WithLabelValues(reason, resp.GetOutcome().String()).Inc()
}

// claimStart claims, before a Job is created, that work starts for the run: on the run itself,
// or on the OrchestrationRun that owns it (whose cancel stops its steps).
func (c *Controller) claimStart(ctx context.Context, ar *agentsv1alpha1.AgentRun) (bool, error) {
	if ref := controllerOf(ar.OwnerReferences, "OrchestrationRun"); ref != nil {
		return c.claim(ctx, "OrchestrationRun", ar.Namespace, ref.Name, string(ref.UID), nil)
	}
	return c.claim(ctx, "AgentRun", ar.Namespace, ar.Name, string(ar.UID), nil)
}

// claim asks status-writer for a start claim on an object (WriteStatusRequest.claim): granted
// unless the object's spec.cancel is true (or it is gone), judged on the live object. fields,
// if any, are written with it.
func (c *Controller) claim(ctx context.Context, kind, ns, name, uid string, fields proto.Message) (bool, error) {
	req := statusclient.WithFields(&pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: kind, Namespace: ns, Name: name, Uid: uid},
		ObservedGeneration: 1, Claim: true}, fields)
	_, err := c.d.Status.Write(ctx, req)
	c.d.Metrics.statusWrites.WithLabelValues(kind).Inc()
	if grpcstatus.Code(err) == codes.NotFound { // nothing to start for
		logging.FromContext(ctx).Info("start refused: the run is gone", "kind", kind, "object", ns+"/"+name)
		return false, nil
	}
	switch err := statusclient.Outcome(err); {
	case err == nil:
		return true, nil
	case errors.Is(err, statusclient.ErrStale):
		logging.FromContext(ctx).Info("start refused: the run is cancelled", "kind", kind, "object", ns+"/"+name, "err", err)
		return false, nil
	default:
		return false, fmt.Errorf("claim a start on %s %s/%s: %w", kind, ns, name, err)
	}
}
