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
	os.Exit(code)
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
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	var wg sync.WaitGroup
	wg.Add(2)
	go candidate(ctxA, "a", &wg)
	first := <-started
	go candidate(ctxB, "b", &wg)
	// The second candidate must not lead while the first holds the lease.
	select {
	case id := <-started:
		t.Fatalf("%s started leading while %s held the lease", id, first)
	case <-time.After(4 * time.Second):
	}
	if first != "a" {
		t.Fatalf("first leader = %s, want a", first)
	}
	handover := time.Now()
	cancelA()
	select {
	case id := <-started:
		if id != "b" {
			t.Fatalf("after a stopped, %s leads", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b never took over after a released the lease")
	}
	// ReleaseOnCancel hands over without waiting out the lease duration.
	if d := time.Since(handover); d > 2500*time.Millisecond {
		t.Errorf("handover took %s; the lease was not released on shutdown", d)
	}
	cancelB()
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
