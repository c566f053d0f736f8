package jobresult

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

func TestReleasePatchRemovesOnlyTheHoldAtItsIndex(t *testing.T) {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"other/keep", agentsv1alpha1.FinalizerJobResult}}}
	p, err := ReleasePatch(j)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"test","path":"/metadata/finalizers/1","value":"agents.proompteng.ai/job-result"},{"op":"remove","path":"/metadata/finalizers/1"}]`
	if string(p) != want {
		t.Errorf("patch %s, want %s", p, want)
	}
	if _, err := ReleasePatch(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"other/keep"}}}); err == nil {
		t.Error("a patch for a Job without the hold")
	}
}
