package eventclient

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/redact"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// About is the request for an event about obj (of apiVersion and kind), its note redacted.
func About(apiVersion, kind string, obj metav1.Object, typ, reason, action, note string) *pb.EmitRequest {
	return &pb.EmitRequest{
		Object: &pb.EventObject{ApiVersion: apiVersion, Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(),
			Uid: string(obj.GetUID()), ResourceVersion: obj.GetResourceVersion()},
		Type: typ, Reason: reason, Note: redact.String(note), Action: action,
	}
}

// Notify emits an event about obj through e, if e is set; a failure is logged, never returned:
// events never hold up a reconcile.
func Notify(ctx context.Context, e Emitter, apiVersion, kind string, obj metav1.Object, typ, reason, action, note string) {
	if e == nil {
		return
	}
	if _, err := e.Emit(ctx, About(apiVersion, kind, obj, typ, reason, action, note)); err != nil {
		logging.FromContext(ctx).Warn("emit event", "reason", reason, "object", obj.GetNamespace()+"/"+obj.GetName(), "err", err)
	}
}
