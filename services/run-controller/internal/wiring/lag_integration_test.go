//go:build integration

package wiring

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
	"github.com/agentplane/agentplane/services/run-controller/internal/orchestrationrun"
)

// TestAStepTheCacheDoesNotShowYetIsNotStartedAgain: the start claim writes the
// OrchestrationRun's status before the step's AgentRun is created, so on a busy API server the
// OrchestrationRun informer shows the claim before the AgentRun informer shows the child, and
// the pass the claim wakes finds no child in the cache. That pass must not claim and create the
// step again (a refused create and a GET of the child, per step; 809 GETs in the 10,000-run tier
// of bench-scale at ba87639). The reconciler runs on caches this test fills by hand, against the
// real API server and status-writer; the AgentRun cache is held back on purpose.
func TestAStepTheCacheDoesNotShowYetIsNotStartedAgain(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	create(t, "orchestrations", ns, orchestration(ns, "pair", step("a"), step("b")))
	create(t, "orchestrationruns", ns, orchRun(ns, "lag", "pair"))

	// The reconciler's creates of AgentRuns, and its GETs of the steps' AgentRuns.
	var creates atomic.Int64
	rc := testenv.CountRequests(env.Config, &creates, func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/agentruns")
	})
	rc, gets := testenv.CountObjectGets(rc, "agentruns", ns)
	client, err := versioned.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	sw, ev := writerClients(t)
	c := core.New(core.Config{Namespaces: []string{ns}, Workers: 1}, kube, md, client, sw, ev, core.NewMetrics(prometheus.NewRegistry()))
	now := time.Now()
	c.Now = func() time.Time { return now }
	c.Runs[ns] = cache.NewSharedIndexInformer(&cache.ListWatch{}, &agentsv1alpha1.AgentRun{}, 0, cache.Indexers{})
	c.OrchRuns[ns] = cache.NewSharedIndexInformer(&cache.ListWatch{}, &orchv1alpha1.OrchestrationRun{}, 0, cache.Indexers{})
	c.Orchs[ns] = cache.NewSharedIndexInformer(&cache.ListWatch{}, &orchv1alpha1.Orchestration{}, 0, cache.Indexers{})
	orch, err := client.OrchestrationV1alpha1().Orchestrations(ns).Get(ctx, "pair", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, c.Orchs[ns].GetStore().Add(orch))
	// The OrchestrationRun informer is up to date: it holds the live run before each pass.
	showRun := func() {
		t.Helper()
		live, err := client.OrchestrationV1alpha1().OrchestrationRuns(ns).Get(ctx, "lag", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		must(t, c.OrchRuns[ns].GetStore().Update(live))
	}
	r := orchestrationrun.New(c)
	pass := func() {
		t.Helper()
		showRun()
		if _, err := r.Reconcile(ctx, ns+"/lag"); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}

	pass() // claims and creates both steps
	if n := creates.Load(); n != 2 {
		t.Fatalf("the first pass created %d AgentRuns, want 2 (steps a and b)", n)
	}
	claimed := getOrchRun(t, ns, "lag")
	if len(claimed.Status.StepStatuses) != 2 {
		t.Fatalf("the claims wrote step statuses %+v, want both steps starting", claimed.Status.StepStatuses)
	}

	// The claims' status reached the OrchestrationRun informer; the children have not reached
	// the AgentRun informer.
	pass()
	if n := creates.Load(); n != 2 {
		t.Errorf("a pass woken before the AgentRun cache showed the steps created them again: %d creates in all, want 2", n)
	}
	if n := gets[ns].Load(); n != 0 {
		t.Errorf("%d GETs of the steps' AgentRuns, want 0", n)
	}
	if got := getOrchRun(t, ns, "lag"); got.ResourceVersion != claimed.ResourceVersion {
		t.Errorf("the second pass wrote the OrchestrationRun's status again (%s, was %s): %+v", got.ResourceVersion, claimed.ResourceVersion, got.Status)
	}

	// The informer shows step a (its event dropped the record of a) but never shows b (say it was
	// deleted before its first event arrived): past CreatedTTL the pass looks for b again.
	a := getRun(t, ns, "lag-a")
	must(t, c.Runs[ns].GetStore().Add(a))
	c.Seen(ns, "lag-a")
	now = now.Add(core.CreatedTTL)
	pass()
	if n := creates.Load(); n != 3 {
		t.Errorf("past CreatedTTL with step b still not in the cache: %d creates in all, want 3 (b looked for again, a not)", n)
	}
	if n := gets[ns].Load(); n != 1 {
		t.Errorf("%d GETs of the steps' AgentRuns in all, want 1 (lag-b's, after its create was refused as existing)", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
