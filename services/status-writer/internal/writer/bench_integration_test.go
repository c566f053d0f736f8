//go:build integration

package writer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// BenchmarkStatusWriteThroughput compares, in one run against the same API server, status writes
// through status-writer (gRPC, contract, status subresource) with direct client-go merge patches
// of the status subresource. Both paths alternate in rounds so machine noise hits them alike.
// Reported: writes/s of each and their ratio (goal: through/direct >= 0.9).
func BenchmarkStatusWriteThroughput(b *testing.B) {
	ns := newNamespace(b)
	const objects, perRound = 8, 40
	// Each path writes its own objects: status-writer is meant to be the only writer of a
	// status, and sharing objects would charge it for the direct path's writes as conflicts.
	var runs, own []*agentsv1alpha1.AgentRun
	for i := 0; i < objects; i++ {
		runs = append(runs, newRun(b, ns, fmt.Sprintf("direct-%d", i)))
		own = append(own, newRun(b, ns, fmt.Sprintf("through-%d", i)))
	}
	res := dyn.Resource(agentsv1alpha1.GroupVersion.WithResource("agentruns")).Namespace(ns)
	ctx := context.Background()
	direct := func() {
		for i := 0; i < perRound; i++ {
			patch := fmt.Sprintf(`{"status":{"phase":"Running","observedGeneration":1,"updatedAt":%q}}`, metav1.NewMicroTime(time.Now()).Format(metav1.RFC3339Micro))
			if _, err := res.Patch(ctx, runs[i%objects].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench-direct"}, "status"); err != nil {
				b.Fatal(err)
			}
		}
	}
	through := func() {
		for i := 0; i < perRound; i++ {
			if _, err := sw.Write(ctx, &pb.WriteStatusRequest{Object: runRef(own[i%objects]), ObservedGeneration: 1, Phase: "Running"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	direct() // warm both paths (connections, caches)
	through()
	var tDirect, tThrough time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := time.Now()
		direct()
		tDirect += time.Since(s)
		s = time.Now()
		through()
		tThrough += time.Since(s)
	}
	n := float64(b.N * perRound)
	b.ReportMetric(n/tDirect.Seconds(), "direct-writes/s")
	b.ReportMetric(n/tThrough.Seconds(), "statuswriter-writes/s")
	b.ReportMetric(tDirect.Seconds()/tThrough.Seconds(), "ratio-vs-direct")
}

// BenchmarkStatusWriteCoalescing runs 8 concurrent writers per object and reports how many API
// writes each request cost (goal: at most 0.3), against 1.0 for uncoalesced writes.
func BenchmarkStatusWriteCoalescing(b *testing.B) {
	ns := newNamespace(b)
	const objects, writers = 4, 8
	var runs []*agentsv1alpha1.AgentRun
	for i := 0; i < objects; i++ {
		runs = append(runs, newRun(b, ns, fmt.Sprintf("hot-%d", i)))
	}
	before := testutil.ToFloat64(metrics.apiWrites.WithLabelValues("AgentRun"))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, run := range runs {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < b.N; i++ {
					if _, err := sw.Write(context.Background(), &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Phase: "Running",
						Conditions: []*pb.Condition{{Type: fmt.Sprintf("Writer%d", w), Status: "True", Reason: "Bench", Message: fmt.Sprint(i)}}}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	requests := float64(b.N * objects * writers)
	apiWrites := testutil.ToFloat64(metrics.apiWrites.WithLabelValues("AgentRun")) - before
	b.ReportMetric(apiWrites/requests, "api-writes/request")
	b.ReportMetric(requests/b.Elapsed().Seconds(), "requests/s")
}
