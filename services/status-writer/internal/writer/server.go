package writer

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/redact"
	"github.com/agentplane/agentplane/libs/status"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Server is the StatusWriter gRPC service.
type Server struct {
	pb.UnimplementedStatusWriterServer
	writer *Writer
	tracer trace.Tracer
}

var _ pb.StatusWriterServer = (*Server)(nil)

// NewServer serves w over gRPC.
func NewServer(w *Writer) *Server {
	return &Server{writer: w, tracer: otel.Tracer(tracerName)}
}

// WriteStatus implements pb.StatusWriterServer.
func (s *Server) WriteStatus(ctx context.Context, in *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error) {
	start := time.Now()
	obj := in.GetObject()
	ctx, span := s.tracer.Start(ctx, "WriteStatus "+obj.GetKind(), trace.WithAttributes(
		attribute.String("k8s.kind", obj.GetKind()),
		attribute.String("k8s.namespace.name", obj.GetNamespace()),
		attribute.String("k8s.object.name", obj.GetName()),
		attribute.String("agentplane.phase", in.GetPhase()),
		attribute.Int64("agentplane.observed_generation", in.GetObservedGeneration()),
	))
	defer span.End()

	req := Request{
		Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUid(),
		FieldManager: in.GetFieldManager(), Claim: in.GetClaim(),
		Contract: status.Request{
			ObservedGeneration: in.GetObservedGeneration(),
			Phase:              in.GetPhase(),
			Reason:             in.GetReason(),
			Message:            redact.String(in.GetMessage()),
		},
	}
	for _, c := range in.GetConditions() {
		req.Contract.Conditions = append(req.Contract.Conditions, metav1.Condition{
			Type: c.GetType(), Status: metav1.ConditionStatus(c.GetStatus()), Reason: c.GetReason(),
			Message: redact.String(c.GetMessage()), ObservedGeneration: c.GetObservedGeneration(),
		})
	}
	if in.GetFields() != nil {
		req.Fields = redactMessages(in.GetFields().AsMap()).(map[string]any)
	}
	res, err := s.writer.Write(ctx, req)
	outcome, code := classify(err)
	s.writer.metrics.writes.WithLabelValues(metricKind(req.Kind), outcome).Inc()
	s.writer.metrics.latency.WithLabelValues(metricKind(req.Kind)).Observe(time.Since(start).Seconds())
	span.SetAttributes(attribute.String("agentplane.outcome", outcome), attribute.Bool("agentplane.coalesced", res.Coalesced))
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		if code == codes.Internal || code == codes.Unavailable {
			logging.FromContext(ctx).ErrorContext(ctx, "write status", "kind", req.Kind, "namespace", req.Namespace, "name", req.Name, "err", err)
		}
		return nil, grpcstatus.Error(code, err.Error())
	}
	raw, err := json.Marshal(res.Status)
	if err != nil {
		return nil, grpcstatus.Error(codes.Internal, err.Error())
	}
	return &pb.WriteStatusResponse{StatusJson: raw, ResourceVersion: res.ResourceVersion, Generation: res.Generation}, nil
}

// classify maps a write error to a metric outcome and a gRPC code an operator can act on.
func classify(err error) (string, codes.Code) {
	var apiStatus apierrors.APIStatus
	switch {
	case err == nil:
		return "written", codes.OK
	case errors.Is(err, status.ErrInvalid):
		return "invalid", codes.InvalidArgument
	case errors.Is(err, ErrNotFound):
		return "not_found", codes.NotFound
	case errors.Is(err, status.ErrPrecondition):
		return "precondition", codes.FailedPrecondition
	case errors.Is(err, ErrConflict):
		return "conflict", codes.Aborted
	case errors.Is(err, context.DeadlineExceeded):
		return "error", codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return "error", codes.Canceled
	case errors.As(err, &apiStatus) && apierrors.IsInvalid(err):
		// The API server's own validation (CEL rules, schema) refused the status.
		return "invalid", codes.FailedPrecondition
	case errors.As(err, &apiStatus) && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)):
		return "error", codes.PermissionDenied
	default:
		return "error", codes.Unavailable
	}
}

// metricKind keeps the kind label bounded: unknown kinds from bad requests share one value.
func metricKind(k string) string {
	if _, ok := kinds[k]; ok {
		return k
	}
	return "unknown"
}

// redactMessages removes secret shapes (libs/redact) from every "message" string of a
// kind-specific field (a workflow step's, an OrchestrationRun step's), at any depth: a status is
// read by anyone who may read the run, and its messages quote what failed.
func redactMessages(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "message" {
				t[k] = redact.String(s)
			} else {
				t[k] = redactMessages(x)
			}
		}
	case []any:
		for i, x := range t {
			t[i] = redactMessages(x)
		}
	}
	return v
}
