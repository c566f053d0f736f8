package writer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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
	fields, err := kindFields(in)
	if err != nil {
		s.writer.metrics.writes.WithLabelValues(metricKind(req.Kind), "invalid").Inc()
		span.SetStatus(otelcodes.Error, err.Error())
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if fields != nil {
		req.Fields = redactMessages(fields).(map[string]any)
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

// kindFields are the request's kind-specific fields by their JSON names: from the typed
// agent_run or orchestration_run, or from the untyped fields of the release before (accepted for
// one release, for a rolling upgrade's old pods). Both at once, or the typed fields of another
// kind than the object's, are refused.
func kindFields(in *pb.WriteStatusRequest) (map[string]any, error) {
	var typed proto.Message
	switch f := in.GetKindFields().(type) {
	case *pb.WriteStatusRequest_AgentRun:
		if k := in.GetObject().GetKind(); k != "AgentRun" {
			return nil, fmt.Errorf("%w: agent_run fields on a %s; send the fields of the object's kind", status.ErrInvalid, k)
		}
		typed = f.AgentRun
	case *pb.WriteStatusRequest_OrchestrationRun:
		if k := in.GetObject().GetKind(); k != "OrchestrationRun" {
			return nil, fmt.Errorf("%w: orchestration_run fields on a %s; send the fields of the object's kind", status.ErrInvalid, k)
		}
		typed = f.OrchestrationRun
	}
	old := in.GetFields() //nolint:staticcheck // SA1019: the previous release's form, still accepted
	switch {
	case typed != nil && old != nil:
		return nil, fmt.Errorf("%w: both fields (the deprecated untyped form) and typed %s fields are set; send only the typed ones", status.ErrInvalid, in.GetObject().GetKind())
	case old != nil:
		return old.AsMap(), nil
	case typed == nil:
		return nil, nil
	}
	raw, err := protojson.Marshal(typed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", status.ErrInvalid, err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%w: %w", status.ErrInvalid, err)
	}
	return out, nil
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
