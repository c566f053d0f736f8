// Package jobresult is the job-result hold on run-controller's Jobs (seed 002): the
// agents.proompteng.ai/job-result finalizer, and the one safe way to release it. job-gc
// releases holds as results are recorded; `agentctl jobs release-holds` releases them all by
// hand (after job-gc is uninstalled, for one).
package jobresult

import (
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// Selector selects run-controller's Jobs, the only ones that carry the hold.
const Selector = agentsv1alpha1.LabelManagedBy + "=" + agentsv1alpha1.ManagedByRunController

// Index is the position of the job-result finalizer in j's finalizers, or -1.
func Index(j *batchv1.Job) int {
	for i, f := range j.Finalizers {
		if f == agentsv1alpha1.FinalizerJobResult {
			return i
		}
	}
	return -1
}

// ReleasePatch is the JSON patch that removes the job-result finalizer from j. It tests the
// finalizer is still at the index read, so the server refuses it (422) if the list changed
// since: no other finalizer is ever removed by mistake.
func ReleasePatch(j *batchv1.Job) ([]byte, error) {
	i := Index(j)
	if i < 0 {
		return nil, fmt.Errorf("Job %s/%s holds no %s finalizer", j.Namespace, j.Name, agentsv1alpha1.FinalizerJobResult)
	}
	return json.Marshal([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": agentsv1alpha1.FinalizerJobResult},
		{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
	})
}
