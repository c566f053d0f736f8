package emitter

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Server is the EventEmitter gRPC service.
type Server struct {
	pb.UnimplementedEventEmitterServer
	e      *Emitter
	tracer trace.Tracer
}

var _ pb.EventEmitterServer = (*Server)(nil)

// NewServer serves e over gRPC.
func NewServer(e *Emitter) *Server {
	return &Server{e: e, tracer: otel.Tracer("github.com/agentplane/agentplane/services/event-emitter")}
}

var outcomes = map[Outcome]pb.EmitOutcome{
	Emitted: pb.EmitOutcome_EMIT_OUTCOME_EMITTED, Counted: pb.EmitOutcome_EMIT_OUTCOME_COUNTED,
	RateLimited: pb.EmitOutcome_EMIT_OUTCOME_RATE_LIMITED, Suppressed: pb.EmitOutcome_EMIT_OUTCOME_SUPPRESSED,
	Disabled: pb.EmitOutcome_EMIT_OUTCOME_DISABLED,
}

// Emit implements pb.EventEmitterServer.
func (s *Server) Emit(ctx context.Context, in *pb.EmitRequest) (*pb.EmitResponse, error) {
	o := in.GetObject()
	ctx, span := s.tracer.Start(ctx, "Emit "+in.GetReason(), trace.WithAttributes(
		attribute.String("k8s.kind", o.GetKind()), attribute.String("k8s.namespace.name", o.GetNamespace()),
		attribute.String("k8s.object.name", o.GetName()), attribute.Bool("agentplane.transient", in.GetTransient()),
	))
	defer span.End()
	outcome, degraded, err := s.e.Emit(ctx, Event{
		Regarding: corev1.ObjectReference{
			APIVersion: o.GetApiVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(),
			UID: types.UID(o.GetUid()), ResourceVersion: o.GetResourceVersion(),
		},
		Type: in.GetType(), Reason: in.GetReason(), Note: in.GetNote(), Action: in.GetAction(), Transient: in.GetTransient(),
		ReportingController: in.GetReportingController(), ReportingInstance: in.GetReportingInstance(),
	})
	if errors.Is(err, ErrInvalid) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	span.SetAttributes(attribute.String("agentplane.outcome", outcome.String()), attribute.Bool("agentplane.degraded", degraded))
	return &pb.EmitResponse{Outcome: outcomes[outcome], Degraded: degraded}, nil
}
