//go:build integration

package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// BenchmarkSpecRulesOnTheAPIServer measures what BenchmarkSpecRules measures in process, on a
// real kube-apiserver: its CPU per AgentRun status write under the CRD's spec rules against the
// baseline's (one spec rule per field, as BenchmarkSpecRules describes). The AgentRun CRD is
// installed twice more, in two groups of its own (no admission policy of the chart matches
// them, so both sides' objects are the same bytes), once with the chart's rules and once with
// the baseline's. Each side keeps 20 runs; rounds of 400 status writes (a JSON merge patch of
// the status subresource, its message changed each time so that every write is stored)
// alternate between the sides, and the API server's own process_cpu_seconds_total is read
// before and after each round. Reported per side: the API server's CPU ms per status write and
// writes per second (one writer at a time); and baseline/ours of the CPU per write. The runs'
// specs are the two of BenchmarkSpecRules: the required fields alone, and four more.
//
//	cd libs && go test -tags integration -run '^$' -bench SpecRulesOnTheAPIServer ./api/
func BenchmarkSpecRulesOnTheAPIServer(b *testing.B) {
	ctx := context.Background()
	crds := apiextensionsclient.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	chart := loadSchema(b, "agents.proompteng.ai_agentruns.yaml")
	sides := []struct {
		name string
		gvr  schema.GroupVersionResource
	}{
		{"ours", installCopy(b, crds, dyn, "ours.specrules.agentplane.test", chart)},
		{"baseline", installCopy(b, crds, dyn, "baseline.specrules.agentplane.test", classicRules(b, chart))},
	}
	for _, shape := range []struct {
		name string
		spec map[string]any
	}{
		{"minimal", map[string]any{"agentRef": map[string]any{"name": "codex"}, "runtime": map[string]any{"type": "job"}}},
		{"typical", map[string]any{
			"agentRef": map[string]any{"name": "codex"}, "runtime": map[string]any{"type": "job"},
			"parameters": map[string]any{"issue": "42"}, "secrets": []any{"github-token"},
			"workload": map[string]any{"image": "registry.example.com/agents/codex:1"}, "ttlSecondsAfterFinished": int64(600)}},
	} {
		b.Run(shape.name, func(b *testing.B) {
			ns, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "specrules-"}}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			const objects, perRound = 20, 400
			for _, side := range sides {
				res := dyn.Resource(side.gvr).Namespace(ns.Name)
				for i := range objects {
					u := &unstructured.Unstructured{Object: map[string]any{
						"apiVersion": side.gvr.GroupVersion().String(), "kind": "AgentRun",
						"metadata": map[string]any{"name": fmt.Sprintf("run-%d", i)}, "spec": shape.spec}}
					if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
						b.Fatalf("%s: create: %v", side.name, err)
					}
				}
			}
			// Both sides must refuse a spec change, so neither is measured without its rules.
			for _, side := range sides {
				_, err := dyn.Resource(side.gvr).Namespace(ns.Name).Patch(ctx, "run-0", types.MergePatchType,
					[]byte(`{"spec":{"agentRef":{"name":"other"}}}`), metav1.PatchOptions{})
				if err == nil || !strings.Contains(err.Error(), "spec.agentRef cannot change once the run is created") {
					b.Fatalf("%s accepted a changed spec.agentRef (%v)", side.name, err)
				}
			}
			n := 0
			round := func(gvr schema.GroupVersionResource) (cpu float64, wall time.Duration) {
				res := dyn.Resource(gvr).Namespace(ns.Name)
				before := apiServerCPU(ctx, b)
				start := time.Now()
				for i := range perRound {
					n++
					patch := fmt.Sprintf(`{"status":{"phase":"Running","observedGeneration":1,"message":"write %d"}}`, n)
					if _, err := res.Patch(ctx, fmt.Sprintf("run-%d", i%objects), types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
						b.Fatal(err)
					}
				}
				return apiServerCPU(ctx, b) - before, time.Since(start)
			}
			for _, side := range sides { // warm both (connections, the CRDs' handlers and caches)
				round(side.gvr)
			}
			cpu := make([]float64, len(sides))
			wall := make([]time.Duration, len(sides))
			b.ResetTimer()
			for range b.N {
				for j, side := range sides {
					c, w := round(side.gvr)
					cpu[j] += c
					wall[j] += w
				}
			}
			b.StopTimer()
			writes := float64(b.N * perRound)
			for j, side := range sides {
				b.ReportMetric(1000*cpu[j]/writes, side.name+"_apiserver_cpu_ms/write")
				b.ReportMetric(writes/wall[j].Seconds(), side.name+"_writes/s")
			}
			b.ReportMetric(cpu[1]/cpu[0], "baseline/ours_apiserver_cpu")
			_ = env.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		})
	}
}

// installCopy installs the AgentRun CRD again in group, with schema s, and returns its resource
// once the API server serves it.
func installCopy(b *testing.B, crds apiextensionsclient.Interface, dyn dynamic.Interface, group string, s *apiextensionsv1.JSONSchemaProps) schema.GroupVersionResource {
	b.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "agentruns." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "agentruns", Singular: "agentrun", Kind: "AgentRun", ListKind: "AgentRunList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: s},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		b.Fatalf("install the AgentRun CRD in %s: %v", group, err)
	}
	b.Cleanup(func() {
		_ = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	gvr := schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "agentruns"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return gvr
		}
		if time.Now().After(deadline) {
			b.Fatalf("the API server does not serve %s 30 s after its CRD was created: %v", gvr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apiServerCPU is the API server's process_cpu_seconds_total, from its /metrics.
func apiServerCPU(ctx context.Context, b *testing.B) float64 {
	b.Helper()
	raw, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("read the API server's /metrics: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("process_cpu_seconds_total %q: %v", v, err)
			}
			return f
		}
	}
	b.Fatal("the API server's /metrics has no process_cpu_seconds_total")
	return 0
}
