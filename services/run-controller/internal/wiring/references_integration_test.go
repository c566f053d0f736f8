//go:build integration

package wiring

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/agentrun"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// TestJobsUseOnlyWhatTheRecordOrTheAgentAllows (#31 item 1): run-controller decides from the API
// server's admission record, never from the run's own say: a user's run naming a Secret its
// Agent lists gets a Job that mounts it; a run the API server admitted only with a warning
// (warn-only rollout) naming a Secret its creator may not get fails Forbidden naming the Secret
// and the creator; a run carrying no record (made while the policies were away) fails Forbidden
// saying so, or runs with UNRECORDED_RUNS=allow.
func TestJobsUseOnlyWhatTheRecordOrTheAgentAllows(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, s := range []string{"agent-secret", "root-secret"} {
		if _, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createAgent(t, ns, "codex", func(a *agentsv1alpha1.Agent) {
		a.Spec.Security = &agentsv1alpha1.AgentSecurity{AllowedServiceAccounts: []string{"bot"}}
	})
	createAgent(t, ns, "listing", func(a *agentsv1alpha1.Agent) {
		a.Spec.Security = &agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"agent-secret"}}
	})
	// alice may create runs, and nothing else.
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"agents.proompteng.ai"}, Resources: []string{"agentruns"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "alice"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	aliceRuns, err := kubeclient.RESTClientFor(cfg, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	asAlice := func(ar *agentsv1alpha1.AgentRun) error {
		return aliceRuns.Post().Namespace(ns).Resource("agentruns").Body(ar).Do(ctx).Error()
	}
	policies := kc.AdmissionregistrationV1()
	startController(t, ns, nil)

	// Through the Agent's list: admitted, recorded as alice's, and run.
	listed := jobRun(ns, "listed", "listing")
	listed.Spec.Secrets = []string{"agent-secret"}
	testenv.Eventually(t, 30*time.Second, "the policies have seen the Agents", func() error { return asAlice(listed) })
	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "listed"), "", 1))
	if ef := j.Spec.Template.Spec.Containers[0].EnvFrom; len(ef) != 1 || ef[0].SecretRef.Name != "agent-secret" {
		t.Errorf("listed's Job env from %+v", ef)
	}

	// Admitted with only a warning (the rollout mode): the record says alice may not get it.
	setActions := func(actions string) {
		t.Helper()
		if _, err := policies.ValidatingAdmissionPolicyBindings().Patch(ctx, "agentplane-run-references", types.MergePatchType,
			[]byte(`{"spec":{"validationActions":`+actions+`}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setActions(`["Warn","Audit"]`)
	warned := jobRun(ns, "warned", "codex")
	warned.Spec.Secrets = []string{"root-secret"}
	testenv.Eventually(t, 30*time.Second, "admitted with a warning", func() error { return asAlice(warned) })
	setActions(`["Deny"]`)
	ar := waitPhase(t, ns, "warned", agentsv1alpha1.PhaseFailed, 30*time.Second)
	if ar.Status.Reason != reasons.Forbidden || !strings.Contains(ar.Status.Message, "Secret root-secret") || !strings.Contains(ar.Status.Message, "(alice) may not get it") {
		t.Errorf("warned: %+v", ar.Status)
	}

	// No record at all (the recording policy was away when they were made): refused, or, in a
	// namespace whose controller allows unrecorded runs, run. Each namespace's controller starts
	// once its run is in place without a record.
	refuseNS, allowNS := namespace(t), namespace(t)
	for _, n := range []string{refuseNS, allowNS} {
		createAgent(t, n, "codex", nil)
		if _, err := kc.CoreV1().Secrets(n).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root-secret"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	binding, err := policies.MutatingAdmissionPolicyBindings().Get(ctx, "agentplane-run-creator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := policies.MutatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	admin, err := kubeclient.RESTClientFor(env.Config, agentsv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{refuseNS, allowNS} {
		unrecorded := jobRun(n, "unrecorded", "codex")
		unrecorded.Spec.Secrets = []string{"root-secret"}
		testenv.Eventually(t, 30*time.Second, "a run created without a record", func() error {
			_ = admin.Delete().Namespace(n).Resource("agentruns").Name("unrecorded").Do(ctx).Error()
			if err := admin.Post().Namespace(n).Resource("agentruns").Body(unrecorded).Do(ctx).Error(); err != nil {
				return err
			}
			if by := getRun(t, n, "unrecorded").Annotations[agentsv1alpha1.AnnotationCreatedBy]; by != "" { //nolint:contextcheck // getRun makes its own context, as at every other call
				return fmt.Errorf("still recorded (by %s)", by)
			}
			return nil
		})
	}
	binding.ResourceVersion = ""
	if _, err := policies.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startController(t, refuseNS, nil)
	ar = waitPhase(t, refuseNS, "unrecorded", agentsv1alpha1.PhaseFailed, 30*time.Second)
	if ar.Status.Reason != reasons.Forbidden || !strings.Contains(ar.Status.Message, "carries no admission record") || !strings.Contains(ar.Status.Message, "Secret root-secret") {
		t.Errorf("unrecorded: %+v", ar.Status)
	}
	for _, n := range []string{ns, refuseNS} {
		for _, j := range jobsIn(t, n) {
			if name := j.Labels[agentsv1alpha1.LabelAgentRun]; name == "warned" || name == "unrecorded" {
				t.Errorf("refused run %s got Job %s", name, j.Name)
			}
		}
	}
	startController(t, allowNS, func(c *core.Config) { c.Policy.UnrecordedRuns = core.UnrecordedAllow })
	waitJob(t, allowNS, agentrun.JobName(getRun(t, allowNS, "unrecorded"), "", 1))
}
