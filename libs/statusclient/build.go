package statusclient

import (
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Request builds the write of one object's status: its identity, the generation reconciled,
// phase, reason, message and conditions; AgentRun and OrchestrationRun add their own fields.
func Request(kind string, obj metav1.Object, observedGeneration int64, phase, reason, message string, conds ...*pb.Condition) *pb.WriteStatusRequest {
	return &pb.WriteStatusRequest{
		Object:             &pb.ObjectRef{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Uid: string(obj.GetUID())},
		ObservedGeneration: observedGeneration, Phase: phase, Reason: reason, Message: message, Conditions: conds,
	}
}

// AgentRunFields are the typed AgentRun fields of a write: the Job that runs it (jobRef, and
// runtimeRef pointing at it) and the workflow's progress; nil leaves a field as it is.
func AgentRunFields(job *agentsv1alpha1.JobRef, workflow *agentsv1alpha1.WorkflowStatus) (*pb.AgentRunFields, error) {
	f := &pb.AgentRunFields{}
	if job != nil {
		f.JobRef = &pb.JobRef{Name: job.Name, Namespace: job.Namespace, Uid: job.UID}
		f.RuntimeRef = map[string]string{"apiVersion": "batch/v1", "kind": "Job", "name": job.Name, "namespace": job.Namespace, "uid": job.UID}
	}
	if workflow != nil {
		f.Workflow = &pb.WorkflowStatus{}
		if err := convert(workflow, f.Workflow); err != nil {
			return nil, fmt.Errorf("workflow status: %w", err)
		}
	}
	return f, nil
}

// OrchestrationRunFields are the typed OrchestrationRun fields of a write.
func OrchestrationRunFields(runID string, steps []orchv1alpha1.StepStatus) (*pb.OrchestrationRunFields, error) {
	f := &pb.OrchestrationRunFields{RunId: runID}
	for _, s := range steps {
		m := &pb.StepStatus{}
		if err := convert(s, m); err != nil {
			return nil, fmt.Errorf("step %s status: %w", s.Name, err)
		}
		f.StepStatuses = append(f.StepStatuses, m)
	}
	return f, nil
}

// convert copies an API status type into its proto message through their shared JSON form
// (the proto's JSON names are the API's); a field the message lacks is an error, so the two
// cannot drift apart unnoticed.
func convert(from any, to proto.Message) error {
	raw, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(raw, to)
}

// ErrStale is what Outcome makes of a write the status contract refused because the object moved
// on: a newer generation, a terminal phase already written, another object under the name, or
// (for a claim) a cancel. The caller's cache is behind; its next look at the object decides.
var ErrStale = errors.New("status write refused: the object moved on")

// Outcome is the one policy every controller applies to a write's result: nil when written or
// when the object is gone (nothing is left to write), ErrStale (wrapping the refusal) when the
// contract refused it as stale, and any other error as it is, to be retried.
func Outcome(err error) error {
	switch grpcstatus.Code(err) {
	case codes.OK, codes.NotFound:
		return nil
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %w", ErrStale, err)
	default:
		return err
	}
}

// WithFields sets req's typed kind fields (*pb.AgentRunFields or *pb.OrchestrationRunFields;
// nil sets none) and returns req.
func WithFields(req *pb.WriteStatusRequest, fields proto.Message) *pb.WriteStatusRequest {
	switch f := fields.(type) {
	case *pb.AgentRunFields:
		if f != nil {
			req.KindFields = &pb.WriteStatusRequest_AgentRun{AgentRun: f}
		}
	case *pb.OrchestrationRunFields:
		if f != nil {
			req.KindFields = &pb.WriteStatusRequest_OrchestrationRun{OrchestrationRun: f}
		}
	}
	return req
}
