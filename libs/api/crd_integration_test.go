//go:build integration

package api_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/testenv"
)

var (
	env *testenv.Kube
	c   client.Client
)

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.StartKube()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err = client.New(env.Config, client.Options{Scheme: kubeclient.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(testenv.NoLeaks(code))
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "crd-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func sampleRun(ns, name string) *agentsv1alpha1.AgentRun {
	ttl := int32(60)
	return &agentsv1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1alpha1.AgentRunSpec{
			AgentRef:                agentsv1alpha1.LocalRef{Name: "codex"},
			Runtime:                 agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob},
			Workload:                &agentsv1alpha1.WorkloadSpec{Image: "busybox:1.36", Resources: &agentsv1alpha1.WorkloadResources{Requests: map[string]string{"cpu": "100m"}}},
			Parameters:              map[string]string{"issue": "42"},
			Secrets:                 []string{"github-token"},
			TTLSecondsAfterFinished: &ttl,
		},
	}
}

func TestAgentRunIsAcceptedAndListedWithItsColumns(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	run := sampleRun(ns, "demo")
	if err := c.Create(ctx, run); err != nil {
		t.Fatalf("create AgentRun: %v", err)
	}
	now := metav1.NewTime(time.Now().Add(-2 * time.Minute).Truncate(time.Second))
	updated := metav1.NewMicroTime(now.Time)
	run.Status = agentsv1alpha1.AgentRunStatus{Phase: agentsv1alpha1.PhaseRunning, StartedAt: &now, UpdatedAt: &updated, ObservedGeneration: run.Generation}
	if err := c.Status().Update(ctx, run); err != nil {
		t.Fatalf("update status: %v", err)
	}

	for _, resource := range []string{"agentrun", "agentruns.agents.proompteng.ai", "ar"} {
		out, errOut, err := env.RunKubectl(ctx, "get", resource, "-n", ns)
		if err != nil {
			t.Fatalf("kubectl get %s: %v: %s", resource, err, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get %s printed %d lines:\n%s", resource, len(lines), out)
		}
		header := strings.Fields(lines[0])
		want := []string{"NAME", "PHASE", "AGENT", "RUNTIME", "START", "COMPLETION", "AGE"}
		if strings.Join(header, " ") != strings.Join(want, " ") {
			t.Fatalf("columns = %v, want %v", header, want)
		}
		row := cells(lines[0], lines[1])
		if row["NAME"] != "demo" || row["PHASE"] != "Running" || row["AGENT"] != "codex" || row["RUNTIME"] != "job" ||
			!strings.HasPrefix(row["START"], "2m") || row["COMPLETION"] != "" || row["AGE"] == "" {
			t.Fatalf("row = %q", row)
		}
	}
}

// cells splits a kubectl table row by the header's column offsets; an empty cell stays empty.
func cells(header, row string) map[string]string {
	names := strings.Fields(header)
	starts := make([]int, len(names)+1)
	from := 0
	for i, name := range names {
		starts[i] = from + strings.Index(header[from:], name)
		from = starts[i] + len(name)
	}
	starts[len(names)] = len(row)
	out := map[string]string{}
	for i, name := range names {
		lo, hi := min(starts[i], len(row)), min(starts[i+1], len(row))
		if i == len(names)-1 {
			hi = len(row)
		}
		out[name] = strings.TrimSpace(row[lo:hi])
	}
	return out
}

func TestInvalidSpecIsRefusedWithTheField(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	run := sampleRun(ns, "bad")
	run.Spec.Runtime.Type = "kubernetes"
	err := c.Create(ctx, run)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.runtime.type") {
		t.Fatalf("create with runtime.type=kubernetes: %v, want Invalid naming spec.runtime.type", err)
	}
	neg := int32(-1)
	run = sampleRun(ns, "bad-ttl")
	run.Spec.TTLSecondsAfterFinished = &neg
	if err := c.Create(ctx, run); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ttlSecondsAfterFinished") {
		t.Fatalf("create with negative ttl: %v", err)
	}
}

func TestStatusIsASubresource(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	run := sampleRun(ns, "sub")
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Status.Phase = agentsv1alpha1.PhaseFailed
	run.Spec.Cancel = true // the one spec field that may change after creation
	if err := c.Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	var got agentsv1alpha1.AgentRun
	if err := c.Get(ctx, client.ObjectKeyFromObject(run), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" {
		t.Fatalf("a main-resource update wrote status.phase=%q", got.Status.Phase)
	}
	if got.Generation != 2 {
		t.Fatalf("generation = %d after a spec edit, want 2", got.Generation)
	}
}

func TestStartedAtAndFinishedAtCannotBeRewritten(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	run := sampleRun(ns, "immutable")
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := env.RunKubectl(ctx, "patch", "agentrun", "immutable", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"phase":"Running","startedAt":"2026-01-01T00:00:00Z"}}`); err != nil {
		t.Fatalf("first set of startedAt refused: %s", errOut)
	}
	for _, patch := range []string{
		`{"status":{"startedAt":"2026-01-02T00:00:00Z"}}`,
		`{"status":{"startedAt":null}}`,
	} {
		_, errOut, err := env.RunKubectl(ctx, "patch", "agentrun", "immutable", "-n", ns, "--subresource=status", "--type=merge", "-p", patch)
		if err == nil || !strings.Contains(errOut, "status.startedAt is immutable once set") {
			t.Fatalf("patch %s: err=%v stderr=%q, want refusal naming startedAt", patch, err, errOut)
		}
	}
	if _, errOut, err := env.RunKubectl(ctx, "patch", "agentrun", "immutable", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"phase":"Succeeded","finishedAt":"2026-01-01T01:00:00Z"}}`); err != nil {
		t.Fatalf("first set of finishedAt refused: %s", errOut)
	}
	_, errOut, err := env.RunKubectl(ctx, "patch", "agentrun", "immutable", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"finishedAt":"2026-01-01T02:00:00Z"}}`)
	if err == nil || !strings.Contains(errOut, "status.finishedAt is immutable once set") {
		t.Fatalf("rewrite of finishedAt: err=%v stderr=%q", err, errOut)
	}
}

func TestOrchestrationRunAcceptsCancel(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	orch := &orchestrationv1alpha1.Orchestration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pipeline"},
		Spec: orchestrationv1alpha1.OrchestrationSpec{Steps: []orchestrationv1alpha1.OrchestrationStep{
			{Name: "plan", Kind: "AgentRun", AgentRef: &orchestrationv1alpha1.NameRef{Name: "codex"}},
			{Name: "implement", Kind: "AgentRun", AgentRef: &orchestrationv1alpha1.NameRef{Name: "codex"}, DependsOn: []string{"plan"}},
		}},
	}
	if err := c.Create(ctx, orch); err != nil {
		t.Fatal(err)
	}
	run := &orchestrationv1alpha1.OrchestrationRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pipeline-1"},
		Spec:       orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "pipeline"}},
	}
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := env.RunKubectl(ctx, "patch", "orchestrationrun", "pipeline-1", "-n", ns, "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
		t.Fatalf("patch cancel: %s", errOut)
	}
	var got orchestrationv1alpha1.OrchestrationRun
	if err := c.Get(ctx, client.ObjectKeyFromObject(run), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Spec.Cancel || got.Generation != 2 {
		t.Fatalf("cancel=%v generation=%d", got.Spec.Cancel, got.Generation)
	}
}

// TestOnlyCancelOfARunsSpecMayChange changes, adds and removes each field of an AgentRun's and
// an OrchestrationRun's spec after creation: each is refused naming the field (by the field's
// own rule for a new value, by the spec's rule for one added or removed), spec.cancel alone may
// go from false to true and not back, and a status write still passes the rules.
func TestOnlyCancelOfARunsSpecMayChange(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, k := range []struct {
		kind, group string
		required    []string
		// fields maps each spec field (but cancel) to a value and another value.
		fields map[string][2]string
	}{
		{"AgentRun", "agents.proompteng.ai", []string{"agentRef", "runtime"}, map[string][2]string{
			"agentRef":                {`{"name":"codex"}`, `{"name":"other"}`},
			"implementationSpecRef":   {`{"name":"impl"}`, `{"name":"impl-2"}`},
			"implementation":          {`{"inline":{"text":"a"}}`, `{"inline":{"text":"b"}}`},
			"runtime":                 {`{"type":"job","config":{"timeoutSeconds":60}}`, `{"type":"job","config":{"timeoutSeconds":61}}`},
			"workflow":                {`{"steps":[{"name":"a"}]}`, `{"steps":[{"name":"b"}]}`},
			"workload":                {`{"image":"busybox:1"}`, `{"image":"busybox:2"}`},
			"parameters":              {`{"issue":"1"}`, `{"issue":"2"}`},
			"secrets":                 {`["one"]`, `["two"]`},
			"memoryRef":               {`{"name":"m"}`, `{"name":"m-2"}`},
			"vcsRef":                  {`{"name":"v"}`, `{"name":"v-2"}`},
			"vcsPolicy":               {`{"mode":"read-only"}`, `{"mode":"none"}`},
			"idempotencyKey":          {`"k1"`, `"k2"`},
			"ttlSecondsAfterFinished": {`60`, `61`},
			"retryOf":                 {`"r1"`, `"r2"`},
		}},
		{"OrchestrationRun", "orchestration.proompteng.ai", []string{"orchestrationRef"}, map[string][2]string{
			"orchestrationRef":        {`{"name":"pipeline"}`, `{"name":"other"}`},
			"parameters":              {`{"issue":"1"}`, `{"issue":"2"}`},
			"deliveryId":              {`"d1"`, `"d2"`},
			"ttlSecondsAfterFinished": {`60`, `61`},
			"retryOf":                 {`"r1"`, `"r2"`},
		}},
	} {
		t.Run(k.kind, func(t *testing.T) {
			// Every field but cancel is in the spec's schema and in this table: a field added to
			// the API without a rule, or without a row here, fails the test.
			crd := &unstructured.Unstructured{}
			crd.SetAPIVersion("apiextensions.k8s.io/v1")
			crd.SetKind("CustomResourceDefinition")
			if err := c.Get(ctx, client.ObjectKey{Name: strings.ToLower(k.kind) + "s." + k.group}, crd); err != nil {
				t.Fatal(err)
			}
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			if len(versions) != 1 {
				t.Fatalf("%s has %d versions, want 1", k.kind, len(versions))
			}
			props, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
			if len(props) == 0 {
				t.Fatalf("%s's CRD has no spec properties", k.kind)
			}
			for f := range props {
				if _, ok := k.fields[f]; !ok && f != "cancel" {
					t.Fatalf("spec.%s of %s has no row in this test", f, k.kind)
				}
			}
			create := func(name string, fields []string) *unstructured.Unstructured {
				t.Helper()
				spec := make([]string, 0, len(fields))
				for _, f := range fields {
					spec = append(spec, fmt.Sprintf("%q:%s", f, k.fields[f][0]))
				}
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q},"spec":{%s}}`,
					k.group+"/v1alpha1", k.kind, name, ns, strings.Join(spec, ",")))); err != nil {
					t.Fatal(err)
				}
				if err := c.Create(ctx, u); err != nil {
					t.Fatalf("create %s %s: %v", k.kind, name, err)
				}
				return u
			}
			all := make([]string, 0, len(k.fields))
			for f := range k.fields {
				all = append(all, f)
			}
			full, bare := create("full", all), create("bare", k.required)
			refused := func(u *unstructured.Unstructured, field, patch string) {
				t.Helper()
				err := c.Patch(ctx, u.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
				want := "spec." + field + " cannot change once the run is created (only spec.cancel can): create a new run"
				if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s %s: patch %s gave %v, want Invalid saying %q", k.kind, u.GetName(), patch, err, want)
				}
			}
			for f, v := range k.fields {
				refused(full, f, fmt.Sprintf(`{"spec":{%q:%s}}`, f, v[1]))
				if !slices.Contains(k.required, f) {
					refused(full, f, fmt.Sprintf(`{"spec":{%q:null}}`, f))
					refused(bare, f, fmt.Sprintf(`{"spec":{%q:%s}}`, f, v[0]))
				}
			}
			// A status write passes every rule; cancel may be set, and not undone.
			if err := c.Status().Patch(ctx, full.DeepCopy(), client.RawPatch(types.MergePatchType,
				[]byte(`{"status":{"phase":"Running","observedGeneration":1,"startedAt":"2026-12-06T20:00:00Z"}}`))); err != nil {
				t.Fatalf("status write refused: %v", err)
			}
			if err := c.Patch(ctx, bare.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
				t.Fatalf("cancel refused: %v", err)
			}
			err := c.Patch(ctx, bare.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":false}}`)))
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.cancel cannot be set back to false") {
				t.Errorf("cancel set back to false: %v", err)
			}
		})
	}
}
