//go:build integration

package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
)

// as is a client that the API server authenticates as user (impersonation by the admin), with the
// API server's warnings collected.
type as struct {
	client.Client
	name     string
	mu       sync.Mutex
	warnings []string
}

func (a *as) HandleWarningHeader(_ int, _ string, text string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.warnings = append(a.warnings, text)
}

func impersonate(t *testing.T, user string) *as {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	a := &as{name: user}
	cfg.WarningHandler = a
	cl, err := client.New(cfg, client.Options{Scheme: kubeclient.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	a.Client = cl
	return a
}

// grant gives user a Role in ns with rules.
func grant(t *testing.T, ns, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	name := strings.NewReplacer(":", "-", "@", "-").Replace(user)
	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}); err != nil {
		t.Fatal(err)
	}
}

func rule(group, resource string, names []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, ResourceNames: names, Verbs: verbs}
}

// TestARunUsesOnlyWhatItsCreatorMayUse (#31 item 1): on a real API server with the chart's
// admission policies, a user who may only create AgentRuns cannot have a run name a Secret, claim
// or ServiceAccount they may not use, by any path (spec.secrets, a secret volume, a workflow
// step's volume, runtime.config.serviceAccountName), unless the run's Agent lists it and the
// Agent's author was allowed it; every refusal names what is missing. The API server records what
// the creator was allowed, whatever the request claimed, and the record cannot change; nor can a
// run's spec, but for cancel. Images outside an Agent's allowedImages are refused, for
// run-controller's step runs too; its delegate verb exempts it from the creator checks only.
func TestARunUsesOnlyWhatItsCreatorMayUse(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, s := range []string{"team-secret", "root-secret", "agent-secret"} {
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s}, StringData: map[string]string{"k": "v"}}); err != nil {
			t.Fatal(err)
		}
	}
	runs := rule("agents.proompteng.ai", "agentruns", nil, "create", "get", "list", "patch", "update")
	grant(t, ns, "alice", runs,
		rule("", "secrets", []string{"team-secret"}, "get"),
		rule("", "persistentvolumeclaims", []string{"data"}, "get"),
		rule("", "serviceaccounts", []string{"other"}, "use"))
	grant(t, ns, "bob", rule("agents.proompteng.ai", "agents", nil, "create", "get", "update", "patch"),
		rule("", "secrets", []string{"team-secret"}, "get"))
	grant(t, ns, "system:serviceaccount:"+ns+":rc", rule("agents.proompteng.ai", "agentruns", nil, "create", "get", "delegate"))
	alice, bob, delegate := impersonate(t, "alice"), impersonate(t, "bob"), impersonate(t, "system:serviceaccount:"+ns+":rc")

	agent := func(name string, sec *agentsv1alpha1.AgentSecurity) *agentsv1alpha1.Agent {
		return &agentsv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: agentsv1alpha1.AgentSpec{ProviderRef: agentsv1alpha1.LocalRef{Name: "p"}, Security: sec}}
	}
	for _, a := range []*agentsv1alpha1.Agent{
		agent("open", &agentsv1alpha1.AgentSecurity{AllowedServiceAccounts: []string{"bot"}}),
		agent("listing", &agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"agent-secret"}}),
		agent("pinned", &agentsv1alpha1.AgentSecurity{AllowedImages: []string{"registry.example.com/agents/*"}}),
	} {
		if err := c.Create(ctx, a); err != nil { // the admin may get every Secret it lists
			t.Fatal(err)
		}
	}
	n := 0
	run := func(agentName string, mutate func(*agentsv1alpha1.AgentRun)) *agentsv1alpha1.AgentRun {
		n++
		ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r" + string(rune('a'+n%26)) + strings.Repeat("x", n/26)},
			Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: agentName}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}}}
		if mutate != nil {
			mutate(ar)
		}
		return ar
	}
	secrets := func(s ...string) func(*agentsv1alpha1.AgentRun) {
		return func(ar *agentsv1alpha1.AgentRun) { ar.Spec.Secrets = s }
	}
	volume := func(v agentsv1alpha1.WorkloadVolume) func(*agentsv1alpha1.AgentRun) {
		return func(ar *agentsv1alpha1.AgentRun) {
			ar.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Volumes: []agentsv1alpha1.WorkloadVolume{v}}
		}
	}
	stepVolume := func(v agentsv1alpha1.WorkloadVolume) func(*agentsv1alpha1.AgentRun) {
		return func(ar *agentsv1alpha1.AgentRun) {
			ar.Spec.Runtime.Type = "workflow"
			ar.Spec.Workflow = &agentsv1alpha1.WorkflowSpec{Steps: []agentsv1alpha1.WorkflowStep{{Name: "a"},
				{Name: "b", Workload: &agentsv1alpha1.WorkloadSpec{Volumes: []agentsv1alpha1.WorkloadVolume{v}}}}}
		}
	}
	serviceAccount := func(sa string) func(*agentsv1alpha1.AgentRun) {
		return func(ar *agentsv1alpha1.AgentRun) {
			ar.Spec.Runtime.Config = map[string]apiextensionsv1.JSON{"serviceAccountName": {Raw: []byte(`"` + sa + `"`)}}
		}
	}
	image := func(img string) func(*agentsv1alpha1.AgentRun) {
		return func(ar *agentsv1alpha1.AgentRun) { ar.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Image: img} }
	}
	secretVol := func(s string) agentsv1alpha1.WorkloadVolume {
		return agentsv1alpha1.WorkloadVolume{Type: "secret", Name: "v", MountPath: "/v", SecretName: s}
	}
	claimVol := func(s string) agentsv1alpha1.WorkloadVolume {
		return agentsv1alpha1.WorkloadVolume{Type: "pvc", Name: "v", MountPath: "/v", ClaimName: s}
	}

	// The policies read Agents from an informer: until it has seen them, a run's Agent is not
	// there to check against (run-controller refuses such a run from the record instead; see
	// services/run-controller). Wait for the refusal that says it has.
	probe := run("open", secrets("root-secret"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := alice.Create(ctx, probe.DeepCopy())
		if err != nil && strings.Contains(err.Error(), "Agent open") {
			break
		}
		if err == nil {
			_ = c.Delete(ctx, probe.DeepCopy())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policies never refused a run naming a Secret its creator may not get: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		name    string
		who     *as
		run     *agentsv1alpha1.AgentRun
		refused []string // the refusal names these; nil: admitted
	}{
		{"a Secret the creator may not get", alice, run("open", secrets("root-secret")), []string{"root-secret", "alice", "Agent open"}},
		{"a Secret the creator may get", alice, run("open", secrets("team-secret")), nil},
		{"a Secret the Agent lists", alice, run("listing", secrets("agent-secret")), nil},
		{"a Secret outside the Agent's list, even one the creator may get", alice, run("listing", secrets("team-secret")), []string{"team-secret", "allowedSecrets (agent-secret)"}},
		{"a secret volume", alice, run("open", volume(secretVol("root-secret"))), []string{"root-secret"}},
		{"a workflow step's secret volume", alice, run("open", stepVolume(secretVol("root-secret"))), []string{"root-secret"}},
		{"a claim the creator may get", alice, run("open", volume(claimVol("data"))), nil},
		{"a claim the creator may not get", alice, run("open", stepVolume(claimVol("db"))), []string{"PersistentVolumeClaim(s) db", "alice"}},
		{"a ServiceAccount the Agent lists", alice, run("open", serviceAccount("bot")), nil},
		{"a ServiceAccount the creator may use", alice, run("open", serviceAccount("other")), nil},
		{"a ServiceAccount neither", alice, run("open", serviceAccount("admin")), []string{"ServiceAccount admin", "may not use"}},
		{"an image the Agent pins", alice, run("pinned", image("registry.example.com/agents/codex:1")), nil},
		{"an image outside the Agent's pins", alice, run("pinned", image("evil.example.com/x:1")), []string{"evil.example.com/x:1", "registry.example.com/agents/*"}},
		{"run-controller's step run, outside the pins", delegate, run("pinned", image("evil.example.com/x:1")), []string{"registry.example.com/agents/*"}},
		{"run-controller's step run is no deputy check", delegate, run("open", secrets("root-secret")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.who.Create(ctx, tc.run)
			switch {
			case tc.refused == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != nil && err == nil:
				t.Fatalf("admitted %s's run %+v", tc.who.name, tc.run.Spec)
			case tc.refused != nil:
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refusal does not name %q: %v", want, err)
					}
				}
				if err := c.Get(ctx, client.ObjectKeyFromObject(tc.run), &agentsv1alpha1.AgentRun{}); err == nil {
					t.Error("a refused run exists")
				}
			}
		})
	}

	t.Run("a delegate's run is recorded with what the delegate may use", func(t *testing.T) {
		// run-controller's step runs skip the refusal (they name only the step's Agent and
		// image); the record still says what their creator may use, and run-controller goes by it.
		ar := run("open", secrets("root-secret"))
		if err := delegate.Create(ctx, ar); err != nil {
			t.Fatal(err)
		}
		if ar.Annotations[agentsv1alpha1.AnnotationCreatedBy] != delegate.name || ar.Annotations[agentsv1alpha1.AnnotationCreatorMayGetSecrets] != "" {
			t.Errorf("record %v: the delegate may not get root-secret", ar.Annotations)
		}
	})

	t.Run("the API server records what the creator may use, whatever the request said", func(t *testing.T) {
		ar := run("open", func(ar *agentsv1alpha1.AgentRun) {
			ar.Annotations = map[string]string{agentsv1alpha1.AnnotationCreatedBy: "admin", agentsv1alpha1.AnnotationCreatorMayGetSecrets: "root-secret"}
			ar.Spec.Secrets = []string{"team-secret"}
			ar.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Volumes: []agentsv1alpha1.WorkloadVolume{claimVol("data")}}
			serviceAccount("other")(ar)
		})
		if err := alice.Create(ctx, ar); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{agentsv1alpha1.AnnotationCreatedBy: "alice", agentsv1alpha1.AnnotationCreatorMayGetSecrets: "team-secret",
			agentsv1alpha1.AnnotationCreatorMayGetClaims: "data", agentsv1alpha1.AnnotationCreatorMayUseServiceAcc: "other"}
		for k, v := range want {
			if ar.Annotations[k] != v {
				t.Errorf("%s = %q, want %q", k, ar.Annotations[k], v)
			}
		}
		// The record cannot change, for the creator or the admin.
		for _, who := range []client.Client{alice, c} {
			patch := []byte(`{"metadata":{"annotations":{"` + agentsv1alpha1.AnnotationCreatorMayGetSecrets + `":"root-secret"}}}`)
			if err := who.Patch(ctx, ar.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err == nil || !strings.Contains(err.Error(), "cannot change") {
				t.Errorf("the record was changed (or refused without saying why): %v", err)
			}
		}
		// Nor can the spec, but for cancel.
		patch := []byte(`{"spec":{"secrets":["team-secret","root-secret"]}}`)
		if err := alice.Patch(ctx, ar.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err == nil ||
			!strings.Contains(err.Error(), "spec.secrets cannot change once the run is created") {
			t.Errorf("spec.secrets changed after creation: %v", err)
		}
		if err := alice.Patch(ctx, ar.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
			t.Errorf("cancel refused: %v", err)
		}
	})

	t.Run("up to 12 Secrets are each checked; more are refused as such", func(t *testing.T) {
		var names []string
		for i := range 13 {
			names = append(names, "s"+string(rune('a'+i)))
		}
		grant(t, ns, "carol", runs, rule("", "secrets", nil, "get")) //nolint:contextcheck // grant makes its own context, as at every other call
		carol := impersonate(t, "carol")
		twelve := run("open", secrets(names[:12]...))
		if err := carol.Create(ctx, twelve); err != nil {
			t.Fatalf("12 Secrets: %v", err)
		}
		if got := strings.Count(twelve.Annotations[agentsv1alpha1.AnnotationCreatorMayGetSecrets], ",") + 1; got != 12 {
			t.Errorf("the record names %d of the 12 Secrets carol may get: %q", got, twelve.Annotations[agentsv1alpha1.AnnotationCreatorMayGetSecrets])
		}
		if err := carol.Create(ctx, run("open", secrets(names...))); err == nil || !strings.Contains(err.Error(), "at most 12 Secrets") {
			t.Errorf("13 Secrets: %v", err)
		}
	})

	t.Run("an Agent may list only what its author may use", func(t *testing.T) {
		if err := bob.Create(ctx, agent("bobs", &agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"root-secret"}})); err == nil ||
			!strings.Contains(err.Error(), "root-secret") || !strings.Contains(err.Error(), "bob") {
			t.Errorf("bob's Agent listing root-secret: %v", err)
		}
		if err := bob.Create(ctx, agent("bobs", &agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"team-secret"}})); err != nil {
			t.Fatal(err)
		}
		// An Agent someone else made: bob may add what he may use, not what he may not; what it
		// already listed is its first author's.
		listing := &agentsv1alpha1.Agent{}
		if err := bob.Get(ctx, client.ObjectKey{Namespace: ns, Name: "listing"}, listing); err != nil {
			t.Fatal(err)
		}
		add := func(s string) error {
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"security": map[string]any{"allowedSecrets": append(slices.Clone(listing.Spec.Security.AllowedSecrets), s)}}})
			return bob.Patch(ctx, listing.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
		}
		if err := add("root-secret"); err == nil || !strings.Contains(err.Error(), "root-secret") {
			t.Errorf("bob added root-secret to listing: %v", err)
		}
		if err := add("team-secret"); err != nil {
			t.Errorf("bob could not add team-secret next to agent-secret: %v", err)
		}
		if err := bob.Create(ctx, agent("bobs-sa", &agentsv1alpha1.AgentSecurity{AllowedServiceAccounts: []string{"admin"}})); err == nil || !strings.Contains(err.Error(), "use") {
			t.Errorf("bob's Agent listing ServiceAccount admin: %v", err)
		}
	})

	t.Run("warn-only rollout: the refusal becomes a warning, the record stays", func(t *testing.T) {
		binding := "agentplane-run-references"
		setActions := func(actions string) {
			t.Helper()
			patch := []byte(`{"spec":{"validationActions":` + actions + `}}`)
			if _, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Patch(ctx, binding, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		setActions(`["Warn","Audit"]`)
		defer setActions(`["Deny"]`)
		ar := run("open", secrets("root-secret"))
		eventuallyAdmitted(t, func() error { return alice.Create(ctx, ar) })
		found := false
		alice.mu.Lock()
		for _, w := range alice.warnings {
			found = found || strings.Contains(w, "root-secret")
		}
		alice.mu.Unlock()
		if !found {
			t.Errorf("no warning names root-secret: %v", alice.warnings)
		}
		if ar.Annotations[agentsv1alpha1.AnnotationCreatorMayGetSecrets] != "" || ar.Annotations[agentsv1alpha1.AnnotationCreatedBy] != "alice" {
			t.Errorf("record %v: alice may not get root-secret", ar.Annotations)
		}
	})
}

// eventuallyAdmitted retries create until the API server admits it: a changed binding reaches the
// admission plugin's cache within seconds, not at once.
func eventuallyAdmitted(t *testing.T, create func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := create()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after 30 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestOnlyUpdateMayChangeARunsMetadata (#31 item 2): a user who may patch runs (and delete them)
// but not update them (the console-operator Role patches, for Cancel) may set spec.cancel and nothing the control plane
// acts on: every change to an AgentRun's or OrchestrationRun's labels, annotations, finalizers or
// ownerReferences is refused naming the field and the verb it needs; a user with update may make
// them.
func TestOnlyUpdateMayChangeARunsMetadata(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	// delete too, so that the API server's own OwnerReferencesPermissionEnforcement (on in
	// libs/testenv, as on OpenShift) lets the owner change through and this policy is what decides.
	grant(t, ns, "operator", rule("agents.proompteng.ai", "agentruns", nil, "get", "patch", "delete"),
		rule("orchestration.proompteng.ai", "orchestrationruns", nil, "get", "patch", "delete"))
	grant(t, ns, "editor", rule("agents.proompteng.ai", "agentruns", nil, "get", "patch", "update", "delete"),
		rule("orchestration.proompteng.ai", "orchestrationruns", nil, "get", "patch", "update", "delete"))
	operator, editor := impersonate(t, "operator"), impersonate(t, "editor")

	owner := metav1.OwnerReference{APIVersion: "orchestration.proompteng.ai/v1alpha1", Kind: "OrchestrationRun", Name: "or",
		UID: "11111111-1111-1111-1111-111111111111", Controller: ptr.To(true)}
	ar := sampleRun(ns, "step")
	ar.Labels = map[string]string{"orchestration.proompteng.ai/run": "or"}
	ar.OwnerReferences = []metav1.OwnerReference{owner}
	or := &orchestrationv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "or"},
		Spec: orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "pipeline"}}}
	for _, o := range []client.Object{ar, or} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	merge := func(who client.Client, o client.Object, patch string) error {
		return who.Patch(ctx, o.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	// The policy is in place once a first change is refused (bindings reach the plugin in seconds).
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := merge(operator, ar, `{"metadata":{"annotations":{"agentplane.dev/simulate-exit-code":"0"}}}`)
		if err != nil && strings.Contains(err.Error(), "metadata.annotations") {
			break
		}
		if err == nil {
			_ = merge(c, ar, `{"metadata":{"annotations":{"agentplane.dev/simulate-exit-code":null}}}`)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a patch-only user's annotation change was never refused naming the field: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		name   string
		obj    client.Object
		patch  string
		fields string
	}{
		{"an AgentRun's annotation", ar, `{"metadata":{"annotations":{"agentplane.dev/simulate-exit-code":"0"}}}`, "metadata.annotations"},
		{"an AgentRun's orchestration label", ar, `{"metadata":{"labels":{"orchestration.proompteng.ai/run":"other"}}}`, "metadata.labels"},
		{"a finalizer that would block job-gc", ar, `{"metadata":{"finalizers":["example.com/stay"]}}`, "metadata.finalizers"},
		{"a step's owner, which cancels it with its OrchestrationRun", ar, `{"metadata":{"ownerReferences":null}}`, "metadata.ownerReferences"},
		{"two fields at once", ar, `{"metadata":{"labels":null,"finalizers":["example.com/other"]}}`, "metadata.labels, metadata.finalizers"},
		{"an OrchestrationRun's label", or, `{"metadata":{"labels":{"team":"x"}}}`, "metadata.labels"},
	} {
		t.Run("patch alone may not change "+tc.name, func(t *testing.T) {
			err := merge(operator, tc.obj, tc.patch)
			if err == nil || !strings.Contains(err.Error(), "operator may not change the "+tc.fields) || !strings.Contains(err.Error(), "needs the verb update") {
				t.Fatalf("got %v, want a refusal naming %s and the verb update", err, tc.fields)
			}
		})
		t.Run("update may change "+tc.name, func(t *testing.T) {
			if err := merge(editor, tc.obj, tc.patch); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
	t.Run("patch alone may cancel", func(t *testing.T) {
		for _, o := range []client.Object{ar, or} {
			if err := merge(operator, o, `{"spec":{"cancel":true}}`); err != nil {
				t.Errorf("%s: cancel refused: %v", o.GetName(), err)
			}
		}
	})
}

// TestTheArchiveVerbMayChangeOnlyTheArchiveFinalizer: a caller with patch and the verb archive on
// runs (job-gc's Role) may add and remove the run archive's finalizer, and nothing else in the
// metadata (another finalizer, a label) nor the archive's finalizer together with another one;
// patch alone may not add it.
func TestTheArchiveVerbMayChangeOnlyTheArchiveFinalizer(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	grant(t, ns, "archiver", rule("agents.proompteng.ai", "agentruns", nil, "get", "patch", "archive"),
		rule("orchestration.proompteng.ai", "orchestrationruns", nil, "get", "patch", "archive"))
	grant(t, ns, "patcher", rule("agents.proompteng.ai", "agentruns", nil, "get", "patch"))
	archiver, patcher := impersonate(t, "archiver"), impersonate(t, "patcher")
	ar := sampleRun(ns, "held")
	or := &orchestrationv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "or"},
		Spec: orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "pipeline"}}}
	for _, o := range []client.Object{ar, or} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	merge := func(who client.Client, o client.Object, patch string) error {
		return who.Patch(ctx, o.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	const hold = `{"metadata":{"finalizers":["agents.proompteng.ai/archive"]}}`
	// The policy is in place once the patch-only caller's hold is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := merge(patcher, ar, hold)
		if err != nil && strings.Contains(err.Error(), "metadata.finalizers") {
			break
		}
		if err == nil {
			_ = merge(c, ar, `{"metadata":{"finalizers":null}}`)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a patch-only caller's archive finalizer was never refused: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, o := range []client.Object{ar, or} {
		if err := merge(archiver, o, hold); err != nil {
			t.Errorf("%s: holding with the verb archive refused: %v", o.GetName(), err)
		}
	}
	for _, tc := range []struct{ name, patch, fields string }{
		{"another finalizer", `{"metadata":{"finalizers":["agents.proompteng.ai/archive","example.com/stay"]}}`, "metadata.finalizers"},
		{"the archive's finalizer swapped for another", `{"metadata":{"finalizers":["example.com/stay"]}}`, "metadata.finalizers"},
		{"a label", `{"metadata":{"labels":{"team":"x"}}}`, "metadata.labels"},
		{"a label beside the finalizer's removal", `{"metadata":{"labels":{"team":"x"},"finalizers":null}}`, "metadata.labels, metadata.finalizers"},
	} {
		if err := merge(archiver, ar, tc.patch); err == nil || !strings.Contains(err.Error(), "archiver may not change the "+tc.fields) {
			t.Errorf("the verb archive changing %s: %v, want a refusal naming %s", tc.name, err, tc.fields)
		}
	}
	for _, o := range []client.Object{ar, or} {
		if err := merge(archiver, o, `{"metadata":{"finalizers":null}}`); err != nil {
			t.Errorf("%s: releasing with the verb archive refused: %v", o.GetName(), err)
		}
	}
}

// TestArchivingOnHoldsEveryRunFromItsCreation (#37): in a namespace where job-gc's chart turned
// the archive switch on (the verb archive granted to system:serviceaccount:agentplane:archive-switch),
// the policy agentplane-archive-hold adds the archive's finalizer to every AgentRun and
// OrchestrationRun created, beside any finalizer the creator gave; elsewhere it adds none.
func TestArchivingOnHoldsEveryRunFromItsCreation(t *testing.T) {
	ctx := context.Background()
	on, off := namespace(t), namespace(t)
	grant(t, on, "system:serviceaccount:agentplane:archive-switch", rule("agents.proompteng.ai", "agentruns", nil, "archive"),
		rule("orchestration.proompteng.ai", "orchestrationruns", nil, "archive"))
	const hold = agentsv1alpha1.FinalizerArchive
	// The policy and the grant are in force once a run created in the namespace comes back held.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		ar := sampleRun(on, fmt.Sprintf("probe-%d", i))
		if err := c.Create(ctx, ar); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ar.Finalizers, hold) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a run created where archiving is on was never held: finalizers %v", ar.Finalizers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ar := sampleRun(on, "with-its-own")
	ar.Finalizers = []string{"example.com/stay"}
	or := &orchestrationv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Namespace: on, Name: "or"},
		Spec: orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "pipeline"}}}
	elsewhere := sampleRun(off, "elsewhere")
	for _, o := range []client.Object{ar, or, elsewhere} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if got := ar.Finalizers; !slices.Contains(got, hold) || !slices.Contains(got, "example.com/stay") {
		t.Errorf("an AgentRun created with a finalizer of its own has %v, want it and the archive's", got)
	}
	if !slices.Contains(or.Finalizers, hold) {
		t.Errorf("an OrchestrationRun created where archiving is on has %v, want the archive's finalizer", or.Finalizers)
	}
	if slices.Contains(elsewhere.Finalizers, hold) {
		t.Errorf("an AgentRun created where archiving is off has %v, want no archive finalizer", elsewhere.Finalizers)
	}
	for _, o := range []client.Object{ar, or} {
		_ = c.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	}
}
