package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/runtime"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"sigs.k8s.io/yaml"

	"github.com/agentplane/agentplane/libs/testenv"
)

// BenchmarkSpecRules measures, in process, what the x-kubernetes-validations rules of the
// AgentRun and OrchestrationRun CRDs' specs cost kube-apiserver on a status write: its status
// strategy evaluates every rule of the object on each write, the spec's transition rules
// included, though a status write cannot change the spec. Three schemas, in the same run:
//
//   - ours: the CRD as the chart installs it (each spec field's own `self == oldSelf`, and one
//     spec rule for fields added or removed whose first term is `self == oldSelf`);
//   - baseline: the same CRD with the rules a careful author writes for the same behaviour, one
//     spec rule per field (`has(self.f) == has(oldSelf.f) && (!has(self.f) || self.f ==
//     oldSelf.f)`), which the CRDs had until this benchmark was written;
//   - floor: the same CRD with no spec rule at all (the status rules, the ratcheting and the
//     walk of the object that every status write pays whatever the spec's rules).
//
// Each is kube-apiserver's own validator (cel.NewValidator, with the status strategy's
// ratcheting option) on the same old and new objects, in rounds that alternate. It reports the
// time and bytes allocated per status write of each, and the spec rules' own cost on the
// baseline over ours, floor taken off both: (baseline - floor) / (ours - floor), in time and in
// bytes.
//
//	cd libs && go test -run '^$' -bench SpecRules -benchmem ./api/
func BenchmarkSpecRules(b *testing.B) {
	for _, k := range []struct {
		name, file string
		// spec is the spec of the run written: the two required fields alone (as the e2e
		// benchmarks create runs), or with four more (as the examples do).
		spec map[string]any
	}{
		{"AgentRun-minimal", "agents.proompteng.ai_agentruns.yaml", map[string]any{
			"agentRef": map[string]any{"name": "codex"}, "runtime": map[string]any{"type": "job"}}},
		{"AgentRun", "agents.proompteng.ai_agentruns.yaml", map[string]any{
			"agentRef": map[string]any{"name": "codex"}, "runtime": map[string]any{"type": "job"},
			"parameters": map[string]any{"issue": "42"}, "secrets": []any{"github-token"},
			"workload": map[string]any{"image": "registry.example.com/agents/codex:1"}, "ttlSecondsAfterFinished": int64(600)}},
		{"OrchestrationRun", "orchestration.proompteng.ai_orchestrationruns.yaml", map[string]any{
			"orchestrationRef": map[string]any{"name": "pipeline"}, "parameters": map[string]any{"issue": "42"}}},
	} {
		b.Run(k.name, func(b *testing.B) {
			crdSchema := loadSchema(b, k.file)
			sides := []struct {
				name string
				v    func(obj, old map[string]any) []string
			}{
				{"ours", validator(b, crdSchema)},
				{"baseline", validator(b, classicRules(b, crdSchema))},
				{"floor", validator(b, noSpecRules(crdSchema))},
			}
			kind, _, _ := strings.Cut(k.name, "-")
			old := map[string]any{"apiVersion": "v1alpha1", "kind": kind,
				"metadata": map[string]any{"name": "r", "namespace": "agents", "generation": int64(1)},
				"spec":     k.spec,
				"status": map[string]any{"phase": "Pending", "reason": "Starting", "observedGeneration": int64(1),
					"updatedAt": "2026-12-06T20:00:00.000000Z"}}
			// The status write: Pending to Running, startedAt set, the spec as it was.
			write := runtime.DeepCopyJSON(old)
			write["status"] = map[string]any{"phase": "Running", "reason": "Running", "observedGeneration": int64(1),
				"startedAt": "2026-12-06T20:00:01Z", "updatedAt": "2026-12-06T20:00:01.000000Z"}
			// A spec write ours and the baseline must refuse (a value changed), so neither is
			// measured skipping its rules; the floor has none to refuse it with.
			bad := runtime.DeepCopyJSON(old)
			bad["spec"].(map[string]any)["parameters"] = map[string]any{"issue": "43"}
			for _, side := range sides {
				if errs := side.v(write, old); len(errs) != 0 {
					b.Fatalf("%s refused the status write: %v", side.name, errs)
				}
				errs := side.v(bad, old)
				refused := len(errs) == 1 && strings.Contains(errs[0], "spec.parameters cannot change once the run is created")
				if refused != (side.name != "floor") {
					b.Fatalf("%s: a changed spec.parameters gave %v", side.name, errs)
				}
			}

			const round = 200
			spent := make([]time.Duration, len(sides))
			bytes := make([]uint64, len(sides))
			var ms goruntime.MemStats
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, side := range sides {
					goruntime.ReadMemStats(&ms)
					a0, t0 := ms.TotalAlloc, time.Now()
					for range round {
						if errs := side.v(write, old); len(errs) != 0 {
							b.Fatal(errs)
						}
					}
					spent[j] += time.Since(t0)
					goruntime.ReadMemStats(&ms)
					bytes[j] += ms.TotalAlloc - a0
				}
			}
			b.StopTimer()
			writes := float64(b.N * round)
			for j, side := range sides {
				b.ReportMetric(float64(spent[j].Nanoseconds())/writes, side.name+"_ns/write")
				b.ReportMetric(float64(bytes[j])/writes, side.name+"_B/write")
			}
			b.ReportMetric((spent[1]-spent[2]).Seconds()/(spent[0]-spent[2]).Seconds(), "spec_rules_baseline/ours_time")
			b.ReportMetric(float64(bytes[1]-bytes[2])/float64(bytes[0]-bytes[2]), "spec_rules_baseline/ours_bytes")
		})
	}
}

// loadSchema reads a CRD the chart installs and returns its one version's schema.
func loadSchema(b *testing.B, file string) *apiextensionsv1.JSONSchemaProps {
	b.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "charts", "agentplane-crds", "files", "crds", file))
	if err != nil {
		b.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		b.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		b.Fatalf("%s: %d versions, want 1", file, len(crd.Spec.Versions))
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// validator is kube-apiserver's CEL validation of a status write (the status strategy's
// ValidateUpdate: every rule, with the ratcheting option), returning the errors' texts.
func validator(b *testing.B, s *apiextensionsv1.JSONSchemaProps) func(obj, old map[string]any) []string {
	b.Helper()
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(s, &internal, nil); err != nil {
		b.Fatal(err)
	}
	st, err := structuralschema.NewStructural(&internal)
	if err != nil {
		b.Fatal(err)
	}
	v := cel.NewValidator(st, true, celconfig.PerCallLimit)
	return func(obj, old map[string]any) []string {
		corr := common.NewCorrelatedObject(obj, old, &model.Structural{Structural: st})
		errs, _ := v.Validate(context.Background(), nil, st, obj, old, celconfig.RuntimeCELCostBudget, cel.WithRatcheting(corr))
		out := make([]string, 0, len(errs))
		for _, e := range errs {
			out = append(out, e.Error())
		}
		return out
	}
}

// classicRules is s with its spec's immutability written the classic way: no rule on the
// fields, and one spec rule per field but spec.cancel (whose own rule is kept).
func classicRules(b *testing.B, s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	b.Helper()
	s = s.DeepCopy()
	spec := s.Properties["spec"]
	required := map[string]bool{}
	for _, f := range spec.Required {
		required[f] = true
	}
	var rules apiextensionsv1.ValidationRules
	for _, r := range spec.XValidations {
		if strings.Contains(r.Rule, "oldSelf.cancel") {
			rules = append(rules, r)
		}
	}
	if len(rules) != 1 || len(spec.XValidations) != 2 {
		b.Fatalf("spec has %d rules (%d about cancel); the baseline expects the cancel rule and the one for fields added or removed", len(spec.XValidations), len(rules))
	}
	fields := make([]string, 0, len(spec.Properties))
	for f := range spec.Properties {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	for _, f := range fields {
		p := spec.Properties[f]
		if f == "cancel" {
			continue
		}
		if len(p.XValidations) != 1 || p.XValidations[0].Rule != "self == oldSelf" {
			b.Fatalf("spec.%s has rules %v; want its one self == oldSelf", f, p.XValidations)
		}
		msg := fmt.Sprintf("spec.%s cannot change once the run is created (only spec.cancel can): create a new run", f)
		rule := fmt.Sprintf("has(self.%[1]s) == has(oldSelf.%[1]s) && (!has(self.%[1]s) || self.%[1]s == oldSelf.%[1]s)", f)
		if required[f] {
			rule = fmt.Sprintf("self.%[1]s == oldSelf.%[1]s", f)
		}
		rules = append(rules, apiextensionsv1.ValidationRule{Rule: rule, Message: msg})
		p.XValidations = nil
		spec.Properties[f] = p
	}
	spec.XValidations = rules
	s.Properties["spec"] = spec
	return s
}

// noSpecRules is s with no rule on its spec or the spec's fields.
func noSpecRules(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	s = s.DeepCopy()
	spec := s.Properties["spec"]
	spec.XValidations = nil
	for f, p := range spec.Properties {
		p.XValidations = nil
		spec.Properties[f] = p
	}
	s.Properties["spec"] = spec
	return s
}
