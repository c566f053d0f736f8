//go:build integration

package limiter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/testenv"
)

// tripHook counts what the client sends to Redis: round trips (a lone command or a pipeline),
// script calls among them, and the largest pipeline of script calls (go-redis pipelines a new
// connection's own handshake too). With gate set, every lone command, once Redis has answered it,
// waits at the hook until the gate is closed (held counts those waiting; their round-trip slots
// stay taken); onPipeline runs before a pipeline of script calls
// is sent.
type tripHook struct {
	mu                     sync.Mutex
	trips, scripts, widest int
	evals                  int // EVAL: the script sent whole (it was not loaded)
	gate                   chan struct{}
	held                   atomic.Int32
	onPipeline             func()
}

func (h *tripHook) count(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips++
	for _, c := range cmds {
		switch c.Name() {
		case "evalsha":
			h.scripts++
			h.widest = max(h.widest, len(cmds))
		case "eval":
			h.scripts++
			h.evals++
		}
	}
}

func scriptCalls(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			return true
		}
	}
	return false
}

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		err := next(ctx, cmd)
		if h.gate != nil {
			h.held.Add(1)
			<-h.gate
		}
		return err
	}
}

func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.onPipeline != nil && scriptCalls(cmds) {
			h.onPipeline()
		}
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *tripHook) totals() (trips, scripts, widest, evals int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trips, h.scripts, h.widest, h.evals
}

// hookedLimiter is a limiter (script loaded) whose client reports to h. A fresh key prefix per
// test, as newLimiter.
func hookedLimiter(t *testing.T, cfg Config, h *tripHook) *Limiter {
	t.Helper()
	cfg.Prefix = fmt.Sprintf("test:%s:%d", t.Name(), time.Now().UnixNano())
	rc := client(t)
	if err := script.Load(context.Background(), rc).Err(); err != nil {
		t.Fatal(err)
	}
	rc.AddHook(h)
	l, err := New(rc, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// holdSenders fills every round-trip slot with a decision held at h's gate (objects
// "held-0".."held-31", decided by Redis already) and returns a wait for their answers, which come
// once the gate is closed.
func holdSenders(t *testing.T, l *Limiter, h *tripHook) (wait func() []Decision) {
	t.Helper()
	answers := make([]Decision, maxSenders)
	var wg sync.WaitGroup
	for i := range maxSenders {
		wg.Go(func() { answers[i] = l.Allow(context.Background(), fmt.Sprintf("held-%d", i), "InvalidSpec", false) })
	}
	testenv.Eventually(t, time.Minute, "every round-trip slot held at the gate", func() error {
		if n := h.held.Load(); n != maxSenders {
			return fmt.Errorf("%d of %d held", n, maxSenders)
		}
		return nil
	})
	return func() []Decision { wg.Wait(); return answers }
}

// awaitWaiting waits until n decisions wait for a round trip.
func awaitWaiting(t *testing.T, l *Limiter, n int) {
	t.Helper()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d decisions waiting", n), func() error {
		l.pipe.mu.Lock()
		defer l.pipe.mu.Unlock()
		if got := len(l.pipe.pending); got != n {
			return fmt.Errorf("%d waiting", got)
		}
		return nil
	})
}

// decideAsync decides for object on its own goroutine; the answer comes on the channel.
func decideAsync(ctx context.Context, l *Limiter, object string) <-chan Decision {
	ch := make(chan Decision, 1)
	go func() { ch <- l.Allow(ctx, object, "InvalidSpec", false) }()
	return ch
}

// answer is the decision on ch, failing the test when none comes within 30 s.
func answer(t *testing.T, ch <-chan Decision, who string) Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(30 * time.Second):
		t.Fatalf("%s got no answer", who)
		return 0
	}
}

// queueWaiting starts n decisions (objects "w-0".."w-<n-1>") while every slot is held, and
// waits until all of them wait for a round trip.
func queueWaiting(t *testing.T, l *Limiter, n int) []<-chan Decision {
	t.Helper()
	chs := make([]<-chan Decision, n)
	for i := range n {
		chs[i] = decideAsync(context.Background(), l, fmt.Sprintf("w-%d", i))
	}
	awaitWaiting(t, l, n)
	return chs
}

func keyExists(t *testing.T, l *Limiter, object string) bool {
	t.Helper()
	n, err := client(t).Exists(context.Background(), l.cfg.Prefix+":{"+object+"}:full").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestConcurrentDecisionsShareRoundTrips: 96 callers deciding at once over 16 objects. Every
// decision is still its own script call, the buckets hold exactly (3 tokens each, the rate too
// slow to refill during the test), and the decisions travel in far fewer round trips than one
// each.
func TestConcurrentDecisionsShareRoundTrips(t *testing.T) {
	const callers, each, objects, burst = 96, 80, 16, 3
	h := &tripHook{}
	l := hookedLimiter(t, Config{PerMinute: 0.001, Burst: burst}, h)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				if l.Allow(context.Background(), fmt.Sprintf("obj-%d", (c+i)%objects), "InvalidSpec", false) == Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if l.Degraded() {
		t.Fatal("the limiter went degraded with Redis up")
	}
	if got := allowed.Load(); got != objects*burst {
		t.Fatalf("%d decisions allowed, want exactly %d (%d objects x a burst of %d)", got, objects*burst, objects, burst)
	}
	trips, scripts, widest, _ := h.totals()
	t.Logf("%d decisions in %d round trips, the largest pipeline %d", callers*each, trips, widest)
	if scripts != callers*each {
		t.Fatalf("%d script calls for %d decisions, want one each", scripts, callers*each)
	}
	if widest < 2 || trips > callers*each*3/4 {
		t.Fatalf("%d decisions took %d round trips (largest %d): concurrent decisions did not share them", callers*each, trips, widest)
	}
}

func TestALoneDecisionIsOneRoundTrip(t *testing.T) {
	h := &tripHook{}
	l := hookedLimiter(t, Config{PerMinute: 60, Burst: 2}, h)
	if d := l.Allow(context.Background(), "u", "InvalidSpec", false); d != Allowed {
		t.Fatalf("got %s", d)
	}
	if trips, scripts, widest, _ := h.totals(); trips != 1 || scripts != 1 || widest != 1 {
		t.Fatalf("a lone decision took %d round trips, %d script calls, largest %d; want one EVALSHA", trips, scripts, widest)
	}
}

// TestACallerThatLeavesWhileWaitingIsNotDecided: with every round-trip slot held, a caller that
// is cancelled, and one whose deadline passes, while waiting get RATE_LIMITED at once (the
// limiter stays on Redis) and their decisions are never made; a caller that stays is decided
// once the slots free up.
func TestACallerThatLeavesWhileWaitingIsNotDecided(t *testing.T) {
	h := &tripHook{gate: make(chan struct{})}
	l := hookedLimiter(t, Config{PerMinute: 60, Burst: 2}, h)
	held := holdSenders(t, l, h)
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(h.gate)
		}
	}
	defer open()

	stayer := decideAsync(context.Background(), l, "stayer")
	awaitWaiting(t, l, 1)

	ctx, cancel := context.WithCancel(context.Background())
	left := decideAsync(ctx, l, "leaver")
	awaitWaiting(t, l, 2)
	cancel()
	if d := answer(t, left, "the cancelled caller, while the slots were held,"); d != RateLimited {
		t.Fatalf("the cancelled caller got %s, want rate_limited", d)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	if d := l.Allow(dctx, "late", "InvalidSpec", false); d != RateLimited || l.Degraded() {
		t.Fatalf("the caller past its deadline got %s (degraded=%v), want rate_limited on Redis", d, l.Degraded())
	}
	awaitWaiting(t, l, 1) // only the stayer

	open()
	if d := answer(t, stayer, "the caller that stayed"); d != Allowed {
		t.Fatalf("the caller that stayed got %s", d)
	}
	for i, d := range held() {
		if d != Allowed {
			t.Fatalf("held decision %d: %s", i, d)
		}
	}
	if l.Degraded() {
		t.Fatal("degraded after callers left")
	}
	for _, o := range []string{"leaver", "late"} {
		if keyExists(t, l, o) {
			t.Errorf("the decision of %q, which left while waiting, was made (its bucket exists)", o)
		}
	}
	if !keyExists(t, l, "stayer") {
		t.Error("the stayer's bucket does not exist")
	}
}

// TestPipelinedDecisionsSurviveAScriptFlush: the scripts are flushed just before a batch goes
// (as after a Redis restart); its decisions are made again, the script loaded, and none is lost
// or sent to the fallback.
func TestPipelinedDecisionsSurviveAScriptFlush(t *testing.T) {
	flush := client(t)
	var flushed atomic.Bool
	h := &tripHook{gate: make(chan struct{})}
	h.onPipeline = func() {
		if !flushed.Swap(true) {
			if err := flush.ScriptFlush(context.Background()).Err(); err != nil {
				t.Error(err)
			}
		}
	}
	l := hookedLimiter(t, Config{PerMinute: 60, Burst: 1}, h)
	held := holdSenders(t, l, h)
	waiting := queueWaiting(t, l, 20)
	close(h.gate)
	for _, ch := range waiting {
		if d := answer(t, ch, "a pipelined decision"); d != Allowed {
			t.Fatalf("a pipelined decision got %s", d)
		}
	}
	held()
	_, _, widest, evals := h.totals()
	if !flushed.Load() || widest < 2 {
		t.Fatalf("flushed=%v, largest pipeline %d: the test did not flush the script under a batch", flushed.Load(), widest)
	}
	if evals == 0 || l.Degraded() {
		t.Fatalf("after NOSCRIPT in a batch its decisions were not made again on Redis (EVALs %d, degraded=%v)", evals, l.Degraded())
	}
}

// TestWaitingCallersAreAnsweredWhenRedisGoes: Redis stops while decisions wait for a round trip;
// each is answered (from the fallback), none hangs.
func TestWaitingCallersAreAnsweredWhenRedisGoes(t *testing.T) {
	h := &tripHook{gate: make(chan struct{})}
	l := hookedLimiter(t, Config{PerMinute: 60, Burst: 3, ProbeInterval: 100 * time.Millisecond}, h)
	held := holdSenders(t, l, h)
	waiting := queueWaiting(t, l, 40)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = srv.Start()
		}
	}()
	close(h.gate)
	for _, ch := range waiting {
		answer(t, ch, "a waiting decision, after Redis went,")
	}
	held()
	if !l.Degraded() {
		t.Fatal("not degraded with Redis gone")
	}
	restarted = true
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "back on Redis", func() error {
		if l.Degraded() {
			return fmt.Errorf("still degraded")
		}
		return nil
	})
}
