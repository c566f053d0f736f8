package testenv

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/rest"
)

// FailedCalls returns a dial option that reports every unary call ending in an error on the
// returned channel (newest dropped when 64 are unread), so that a test can wait for a client's
// attempts instead of for time to pass.
func FailedCalls() (grpc.DialOption, <-chan error) {
	failed := make(chan error, 64)
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
		return err
	}), failed
}

// Reconciles records when a controller's reconciles of each key start and end. A controller
// calls Observe at the start of a reconcile and the returned func at its end. With it a test
// can wait for a reconcile that began after a change was in the controller's cache, and then
// assert that nothing happened, without sleeping.
type Reconciles struct {
	mu      sync.Mutex
	changed chan struct{}
	started map[string]int
	ended   map[string]int
}

// NewReconciles returns an empty record.
func NewReconciles() *Reconciles {
	return &Reconciles{changed: make(chan struct{}), started: map[string]int{}, ended: map[string]int{}}
}

// Observe records the start of a reconcile of key; call the result when it ends. A workqueue
// never hands one key to two workers at once, so a key's reconciles end in the order they
// started.
func (r *Reconciles) Observe(key string) func() {
	r.mu.Lock()
	r.started[key]++
	n := r.started[key]
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.ended[key] = max(r.ended[key], n)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// Mark returns how many reconciles of key have started.
func (r *Reconciles) Mark(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started[key]
}

// AwaitAfter waits until a reconcile of key that started after mark has ended. Enqueue the key
// after taking the mark, so that one is sure to start. timeout only guards against a hang.
func (r *Reconciles) AwaitAfter(t testing.TB, key string, mark int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		done, changed := r.ended[key] > mark, r.changed
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no reconcile of %s started after mark %d ended within %s", key, mark, timeout)
		}
	}
}

// Goal reports whether a benchmark met one of its goals: a figure goal-met/<name>, 1 when met and
// 0 when missed, which `make bench-report` lists under the benchmark, and a log line, so that a
// missed goal is printed, not hidden.
func Goal(b *testing.B, name string, met bool) {
	b.Helper()
	v, verdict := 0.0, "GOAL MISSED"
	if met {
		v, verdict = 1, "goal met"
	}
	b.ReportMetric(v, "goal-met/"+name)
	b.Logf("%s: %s", verdict, name)
}

// CountRequests returns a copy of cfg whose clients count, in n, each request for which match
// returns true (every request when match is nil): a test waits on a client's attempts, a benchmark
// counts what a path asked of the API server.
func CountRequests(cfg *rest.Config, n *atomic.Int64, match func(*http.Request) bool) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if match == nil || match(r) {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	return c
}

// CountObjectGets returns a copy of cfg whose clients count, per namespace, the GETs of single
// objects of resource (say "agentruns") in each of namespaces: what a test counts to show that a
// component reads from its cache instead of the API server.
func CountObjectGets(cfg *rest.Config, resource string, namespaces ...string) (*rest.Config, map[string]*atomic.Int64) {
	gets := map[string]*atomic.Int64{}
	for _, ns := range namespaces {
		gets[ns] = &atomic.Int64{}
	}
	var all atomic.Int64
	return CountRequests(cfg, &all, func(r *http.Request) bool {
		if r.Method == http.MethodGet {
			for ns, n := range gets {
				if strings.Contains(r.URL.Path, "/namespaces/"+ns+"/"+resource+"/") {
					n.Add(1)
				}
			}
		}
		return true
	}), gets
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
