package orchestrationrun

import (
	"testing"

	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

func TestTopoOrderRefusesCyclesAndUnknownSteps(t *testing.T) {
	st := func(name string, deps ...string) orchv1alpha1.OrchestrationStep {
		return orchv1alpha1.OrchestrationStep{Name: name, Kind: "AgentRun", AgentRef: &orchv1alpha1.NameRef{Name: "a"}, DependsOn: deps}
	}
	order, err := topoOrder([]orchv1alpha1.OrchestrationStep{st("d", "b", "c"), st("b", "a"), st("c", "a"), st("a")})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, s := range order {
		pos[s.Name] = i
	}
	if !(pos["a"] < pos["b"] && pos["a"] < pos["c"] && pos["b"] < pos["d"] && pos["c"] < pos["d"]) {
		t.Errorf("order %v", pos)
	}
	for _, bad := range [][]orchv1alpha1.OrchestrationStep{
		{st("x", "y"), st("y", "x")}, {st("x", "nope")}, {st("x"), st("x")},
		{{Name: "t", Kind: "Tool"}},
	} {
		if _, err := topoOrder(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
