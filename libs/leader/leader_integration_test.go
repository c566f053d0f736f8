//go:build integration

package leader

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/testenv"
)

var env *testenv.Kube

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.StartKube(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(testenv.NoLeaks(code))
}

func TestOneLeaderAtATimeAndHandOverOnShutdown(t *testing.T) {
	var leading, maxLeading atomic.Int32
	started := make(chan string, 2)
	candidate := func(ctx context.Context, id string, wg *sync.WaitGroup) {
		defer wg.Done()
		err := Run(ctx, env.Client, Config{
			Namespace: "default", Name: "test-lock", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		}, func(ctx context.Context) {
			n := leading.Add(1)
			for {
				m := maxLeading.Load()
				if n <= m || maxLeading.CompareAndSwap(m, n) {
					break
				}
			}
			started <- id
			<-ctx.Done()
			leading.Add(-1)
		})
		if err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	// Both campaign at once: either may win, and the Lease must name the one that leads.
	ctxs := map[string]context.Context{}
	cancels := map[string]context.CancelFunc{}
	for _, id := range []string{"a", "b"} {
		ctxs[id], cancels[id] = context.WithCancel(context.Background())
		defer cancels[id]()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go candidate(ctxs["a"], "a", &wg)
	go candidate(ctxs["b"], "b", &wg)
	first := <-started
	second := map[string]string{"a": "b", "b": "a"}[first]
	lease, err := env.Client.CoordinationV1().Leases("default").Get(context.Background(), "test-lock", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != first {
		t.Fatalf("%s leads but the Lease names %v", first, lease.Spec.HolderIdentity)
	}
	// The other must not lead while the first holds the lease.
	select {
	case id := <-started:
		t.Fatalf("%s started leading while %s held the lease", id, first)
	case <-time.After(4 * time.Second):
	}
	handover := time.Now()
	cancels[first]()
	select {
	case id := <-started:
		if id != second {
			t.Fatalf("after %s stopped, %s leads", first, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never took over after %s released the lease", second, first)
	}
	// ReleaseOnCancel hands over without waiting out the lease duration.
	if d := time.Since(handover); d > 2500*time.Millisecond {
		t.Errorf("handover took %s; the lease was not released on shutdown", d)
	}
	cancels[second]()
	wg.Wait()
	if maxLeading.Load() != 1 {
		t.Fatalf("%d candidates led at once", maxLeading.Load())
	}
}

// Run returns only once the leader's work has returned, so what the work wrote is there to read
// (RunService returns the work's error that way); client-go itself does not wait for it.
func TestRunWaitsForTheLeadersWorkToReturn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	var finished atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, env.Client, Config{Namespace: "default", Name: "wait-lock", Identity: "w",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond},
			func(ctx context.Context) {
				close(leading)
				<-ctx.Done()
				time.Sleep(300 * time.Millisecond) // slow to wind down
				finished.Store(true)
			})
	}()
	<-leading
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Fatal("Run returned while the leader's work was still running")
	}
}
