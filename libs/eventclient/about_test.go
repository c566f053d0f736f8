package eventclient

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An event request names its object exactly and never carries a secret the note held.
func TestAboutNamesTheObjectAndRedactsTheNote(t *testing.T) {
	obj := &metav1.ObjectMeta{Namespace: "agents", Name: "r", UID: "u-1", ResourceVersion: "42"}
	req := About("agents.proompteng.ai/v1alpha1", "AgentRun", obj, "Warning", "WorkflowJobMissing", "Check", "clone failed: password=hunter2 rejected")
	o := req.GetObject()
	if o.GetApiVersion() != "agents.proompteng.ai/v1alpha1" || o.GetKind() != "AgentRun" || o.GetNamespace() != "agents" ||
		o.GetName() != "r" || o.GetUid() != "u-1" || o.GetResourceVersion() != "42" {
		t.Errorf("object %+v", o)
	}
	if req.GetType() != "Warning" || req.GetReason() != "WorkflowJobMissing" || req.GetAction() != "Check" {
		t.Errorf("request %+v", req)
	}
	if strings.Contains(req.GetNote(), "hunter2") || !strings.Contains(req.GetNote(), "clone failed") {
		t.Errorf("note %q: the secret must go, the rest stay", req.GetNote())
	}
}
