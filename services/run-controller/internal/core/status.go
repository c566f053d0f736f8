package core

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
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	scaffold "github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/statusclient"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Cond is a condition a reconciler wants an object's status to carry.
type Cond struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// C is a Cond.
func C(typ string, status metav1.ConditionStatus, reason, message string) Cond {
	return Cond{Type: typ, Status: status, Reason: reason, Message: message}
}

// WriteStatus writes an object's status through status-writer; fields are its kind's typed
// fields (nil: none). A write refused as stale (the object moved on) is a wait: the reconcile is
// retried with backoff and sees the newer object (statusclient.Outcome, the policy every
// controller shares).
func (c *Core) WriteStatus(ctx context.Context, kind, ns, name, uid string, gen int64, phase, reason, message string, conds []Cond, fields proto.Message) error {
	req := statusRequest(kind, ns, name, uid, gen, phase, reason, message, conds, fields)
	start := time.Now()
	_, err := c.Status.Write(ctx, req)
	c.Metrics.StatusWrites.WithLabelValues(kind).Inc()
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

// statusRequest is statusclient.Request for an object known by kind, namespace, name and uid
// (a claim on a step run's OrchestrationRun has only its owner reference), with fields.
func statusRequest(kind, ns, name, uid string, gen int64, phase, reason, message string, conds []Cond, fields proto.Message) *pb.WriteStatusRequest {
	pconds := make([]*pb.Condition, 0, len(conds))
	for _, cd := range conds {
		pconds = append(pconds, &pb.Condition{Type: cd.Type, Status: string(cd.Status), Reason: cd.Reason, Message: cd.Message})
	}
	obj := &metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}
	return statusclient.WithFields(statusclient.Request(kind, obj, gen, phase, reason, message, pconds...), fields)
}

// CondsSay reports whether the conditions have say each of want.
func CondsSay(have []metav1.Condition, want []Cond) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.Type == w.Type {
				found = h.Status == w.Status && h.Reason == w.Reason && h.Message == w.Message
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// SameJSON reports whether a and b encode to the same JSON.
func SameJSON(a, b any) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return bytes.Equal(ra, rb)
}

// Emit sends an event about obj through event-emitter. A failure is logged: events never hold
// up a reconcile.
func (c *Core) Emit(ctx context.Context, obj metav1.Object, typ, reason, action, note string, transient bool) {
	kind, apiVersion := "AgentRun", agentsv1alpha1.GroupVersion.String()
	if _, ok := obj.(*orchv1alpha1.OrchestrationRun); ok {
		kind, apiVersion = "OrchestrationRun", orchv1alpha1.GroupVersion.String()
	}
	req := eventclient.About(apiVersion, kind, obj, typ, reason, action, note)
	req.Transient = transient
	resp, err := c.Events.Emit(ctx, req)
	if err != nil {
		logging.FromContext(ctx).Warn("emit event", "reason", reason, "object", obj.GetNamespace()+"/"+obj.GetName(), "err", err)
		return
	}
	c.Metrics.Events.WithLabelValues(reason, resp.GetOutcome().String()).Inc()
}

// Claim asks status-writer for a start claim on an object (WriteStatusRequest.claim): granted
// unless the object's spec.cancel is true (or it is gone), judged on the live object. fields,
// if any, are written with it; the object's phase, reason, message and conditions are kept.
func (c *Core) Claim(ctx context.Context, kind, ns, name, uid string, fields proto.Message) (bool, error) {
	return c.claim(ctx, statusRequest(kind, ns, name, uid, 1, "", "", "", nil, fields))
}

// ClaimWithStatus is a start claim that also writes the status the object starts with (phase,
// reason, message, conditions, fields for generation gen): one write where Claim and
// WriteStatus would make two. It is refused, writing nothing, as Claim is.
func (c *Core) ClaimWithStatus(ctx context.Context, kind, ns, name, uid string, gen int64, phase, reason, message string, conds []Cond, fields proto.Message) (bool, error) {
	return c.claim(ctx, statusRequest(kind, ns, name, uid, gen, phase, reason, message, conds, fields))
}

func (c *Core) claim(ctx context.Context, req *pb.WriteStatusRequest) (bool, error) {
	req.Claim = true
	kind, ns, name := req.GetObject().GetKind(), req.GetObject().GetNamespace(), req.GetObject().GetName()
	_, err := c.Status.Write(ctx, req)
	c.Metrics.StatusWrites.WithLabelValues(kind).Inc()
	if grpcstatus.Code(err) == codes.NotFound { // nothing to start for
		logging.FromContext(ctx).Info("start refused: the run is gone", "kind", kind, "object", ns+"/"+name)
		return false, nil
	}
	switch err := statusclient.Outcome(err); {
	case err == nil:
		return true, nil
	case errors.Is(err, statusclient.ErrStale):
		logging.FromContext(ctx).Info("start refused: the run is cancelled, or its status moved on (finished, or a newer generation)", "kind", kind, "object", ns+"/"+name, "err", err)
		return false, nil
	default:
		return false, fmt.Errorf("claim a start on %s %s/%s: %w", kind, ns, name, err)
	}
}
