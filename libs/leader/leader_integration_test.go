//go:build integration

package leader

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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

// leaseRequests returns a client for one candidate that counts its requests for Leases, so a
// test can wait for a candidate's attempts rather than for time to pass.
func leaseRequests(t *testing.T, n *atomic.Int64) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(testenv.CountRequests(env.Config, n, func(r *http.Request) bool {
		return strings.Contains(r.URL.Path, "/leases/")
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaderCount is the work of candidates that counts how many lead at once: each says on started
// that it began, and holds until its context ends.
type leaderCount struct {
	leading, most atomic.Int32
	started       chan string
}

func (l *leaderCount) work(id string) func(ctx context.Context) {
	return func(ctx context.Context) {
		n := l.leading.Add(1)
		for {
			m := l.most.Load()
			if n <= m || l.most.CompareAndSwap(m, n) {
				break
			}
		}
		l.started <- id
		<-ctx.Done()
		l.leading.Add(-1)
	}
}

func TestOneLeaderAtATimeAndHandOverOnShutdown(t *testing.T) {
	leaders := &leaderCount{started: make(chan string, 2)}
	started := leaders.started
	requests := map[string]*atomic.Int64{"a": {}, "b": {}}
	clients := map[string]kubernetes.Interface{"a": leaseRequests(t, requests["a"]), "b": leaseRequests(t, requests["b"])}
	candidate := func(ctx context.Context, id string, wg *sync.WaitGroup) {
		defer wg.Done()
		err := Run(ctx, clients[id], Config{
			Namespace: "default", Name: "test-lock", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		}, leaders.work(id))
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
	t.Cleanup(wg.Wait) // after the deferred cancels: no candidate outlives the test
	wg.Add(2)
	go candidate(ctxs["a"], "a", &wg)
	go candidate(ctxs["b"], "b", &wg)
	var first string
	select {
	case first = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("nobody led within 30s")
	}
	second := map[string]string{"a": "b", "b": "a"}[first]
	lease, err := env.Client.CoordinationV1().Leases("default").Get(context.Background(), "test-lock", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder(lease) != first {
		t.Fatalf("%s leads but the Lease names %q", first, holder(lease))
	}
	// The other must not lead while the first holds the lease: let it try five more times (each
	// try reads the Lease), then neither the Lease nor the work may have changed hands.
	tried := requests[second].Load()
	testenv.Eventually(t, 30*time.Second, second+" tries for the lease five more times", func() error {
		if n := requests[second].Load(); n < tried+5 {
			return fmt.Errorf("%d more requests", n-tried)
		}
		return nil
	})
	select {
	case id := <-started:
		t.Fatalf("%s started leading while %s held the lease", id, first)
	default:
	}
	if l, err := env.Client.CoordinationV1().Leases("default").Get(context.Background(), "test-lock", metav1.GetOptions{}); err != nil || holder(l) != first {
		t.Fatalf("while %s led, the Lease was taken: %v %v", first, err, l)
	}
	// ReleaseOnCancel hands over without waiting out the lease: the Lease is emptied by the
	// leaving leader before the other takes it (had it expired instead, the other would write
	// itself over the old holder).
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	w, err := env.Client.CoordinationV1().Leases("default").Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=test-lock", ResourceVersion: lease.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cancels[first]()
	var holders []string
	for ev := range w.ResultChan() {
		l, ok := ev.Object.(*coordinationv1.Lease)
		if !ok {
			t.Fatalf("watch: %v", ev.Object)
		}
		if h := holder(l); len(holders) == 0 || holders[len(holders)-1] != h {
			holders = append(holders, h)
		}
		if holder(l) == second {
			break
		}
	}
	if want := []string{first, "", second}; strings.Join(holders, ",") != strings.Join(want, ",") &&
		strings.Join(holders, ",") != strings.Join(want[1:], ",") {
		t.Fatalf("the Lease's holders after %s stopped were %q, want it released (\"\") before %s took it", first, holders, second)
	}
	select {
	case id := <-started:
		if id != second {
			t.Fatalf("after %s stopped, %s leads", first, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s holds the Lease but its work never started", second)
	}
	cancels[second]()
	wg.Wait()
	if leaders.most.Load() != 1 {
		t.Fatalf("%d candidates led at once", leaders.most.Load())
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
				// Slow to wind down: the scenario, not synchronisation. A Run that did not wait
				// would return within this time (it returns once the Lease is released).
				time.Sleep(300 * time.Millisecond)
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

// TestAnEarlierReleasesReplicaAndANewOneNeverLeadAtOnce: during an upgrade that renames the
// Lease, a replica of the earlier release (which knows only the old Lease) and replicas of the new
// one (which hold the new Lease and the old, LegacyName) lead one at a time: the new ones wait
// while the old one leads, one of them takes over when it stops, and a late old replica then
// waits in turn. Without the pair (Name alone) a new replica would lead at once beside the old.
func TestAnEarlierReleasesReplicaAndANewOneNeverLeadAtOnce(t *testing.T) {
	leaders := &leaderCount{started: make(chan string, 4)}
	started := leaders.started
	requests := map[string]*atomic.Int64{"old-1": {}, "new-1": {}, "new-2": {}, "old-2": {}}
	ctxs, cancels := map[string]context.Context{}, map[string]context.CancelFunc{}
	for id := range requests {
		ctxs[id], cancels[id] = context.WithCancel(context.Background())
		defer cancels[id]()
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	candidate := func(id string) {
		wg.Add(1)
		cfg := Config{Namespace: "default", Name: "agentplane-upgrade", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
		if strings.HasPrefix(id, "new") {
			cfg.Name, cfg.LegacyName = "rel-upgrade", "agentplane-upgrade"
		}
		go func() {
			defer wg.Done()
			err := Run(ctxs[id], leaseRequests(t, requests[id]), cfg, leaders.work(id))
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	leads := func(want ...string) string {
		t.Helper()
		select {
		case id := <-started:
			for _, w := range want {
				if id == w {
					return id
				}
			}
			t.Fatalf("%s started leading; want one of %v", id, want)
		case <-time.After(30 * time.Second):
			t.Fatalf("none of %v led within 30s", want)
		}
		return ""
	}
	waitsWhile := func(leader string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			tried := requests[id].Load()
			testenv.Eventually(t, 30*time.Second, id+" tries for the lease five more times", func() error {
				if n := requests[id].Load(); n < tried+10 {
					return fmt.Errorf("%d more requests", n-tried)
				}
				return nil
			})
		}
		select {
		case id := <-started:
			t.Fatalf("%s started leading while %s led", id, leader)
		default:
		}
	}
	candidate("old-1")
	leads("old-1")
	candidate("new-1")
	candidate("new-2")
	waitsWhile("old-1", "new-1", "new-2")
	cancels["old-1"]()
	next := leads("new-1", "new-2")
	for _, name := range []string{"rel-upgrade", "agentplane-upgrade"} {
		l, err := env.Client.CoordinationV1().Leases("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || holder(l) != next {
			t.Fatalf("%s leads, but Lease %s names %v (%v)", next, name, l, err)
		}
	}
	candidate("old-2")
	other := map[string]string{"new-1": "new-2", "new-2": "new-1"}[next]
	waitsWhile(next, "old-2", other)
	cancels[next]()
	leads(other, "old-2")
	for id := range cancels {
		cancels[id]()
	}
	wg.Wait()
	if leaders.most.Load() != 1 {
		t.Fatalf("%d candidates led at once", leaders.most.Load())
	}
}
