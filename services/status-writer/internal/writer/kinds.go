package writer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/status"
)

// kind describes how one CRD's status is written: which contract fields it has and which
// kind-specific fields a caller may set.
type kind struct {
	name     string
	resource schema.GroupVersionResource
	// phases lists accepted phases; hasPhase false means the kind has no status.phase.
	hasPhase bool
	phases   status.Phases
	// hasRunFields: reason, message, startedAt and finishedAt exist (the run kinds).
	hasRunFields bool
	// extra decodes the kind-specific fields strictly; nil means the kind has none.
	extra func() any
}

// agentRunExtra are the fields of AgentRun.status a caller may set besides the contract's.
type agentRunExtra struct {
	RuntimeRef map[string]any                 `json:"runtimeRef,omitempty"`
	JobRef     *agentsv1alpha1.JobRef         `json:"jobRef,omitempty"`
	Workflow   *agentsv1alpha1.WorkflowStatus `json:"workflow,omitempty"`
	Artifacts  []agentsv1alpha1.Artifact      `json:"artifacts,omitempty"`
}

type orchestrationRunExtra struct {
	RunID        string                             `json:"runId,omitempty"`
	StepStatuses []orchestrationv1alpha1.StepStatus `json:"stepStatuses,omitempty"`
}

var kinds = map[string]*kind{
	"AgentRun": {
		name: "AgentRun", resource: agentsv1alpha1.GroupVersion.WithResource("agentruns"),
		hasPhase: true, phases: status.RunPhases, hasRunFields: true,
		extra: func() any { return &agentRunExtra{} },
	},
	"OrchestrationRun": {
		name: "OrchestrationRun", resource: orchestrationv1alpha1.GroupVersion.WithResource("orchestrationruns"),
		hasPhase: true, phases: status.RunPhases, hasRunFields: true,
		extra: func() any { return &orchestrationRunExtra{} },
	},
	"Agent": {
		name: "Agent", resource: agentsv1alpha1.GroupVersion.WithResource("agents"),
	},
	"Orchestration": {
		name: "Orchestration", resource: orchestrationv1alpha1.GroupVersion.WithResource("orchestrations"),
		hasPhase: true,
	},
}

func kindNames() string {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// decodeExtra checks the kind-specific fields strictly (unknown or mistyped fields are errors)
// and returns them normalised, ready to be merged into .status.
func (k *kind) decodeExtra(fields map[string]any) (map[string]any, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	if k.extra == nil {
		return nil, fmt.Errorf("%s status has no kind-specific fields", k.name)
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	typed := k.extra()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(typed); err != nil {
		return nil, fmt.Errorf("fields: %w", err)
	}
	norm, err := json.Marshal(typed)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(norm, &out); err != nil {
		return nil, err
	}
	// A field the caller set to an empty value clears it.
	for name := range fields {
		if _, ok := out[name]; !ok {
			out[name] = nil
		}
	}
	return out, nil
}
