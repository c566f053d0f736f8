//go:build integration

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/r3labs/sse/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/testenv"
)

var (
	env *testenv.Kube
	rds *testenv.Redis
)

func TestMain(m *testing.M) {
	if os.Getenv("BENCH_SSE_URL") != "" || os.Getenv("BENCH_REPLICA_URLS") != "" {
		os.Exit(m.Run()) // the watcher processes of the benchmarks need no API server
	}
	os.Exit(testenv.NoLeaks(func() int {
		var err error
		if env, err = testenv.StartKube(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer env.Stop()
		if rds, err = testenv.StartRedis(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer rds.Close()
		return m.Run()
	}()))
}

// fakeService is a real gRPC server with grpc.health.v1, standing in for an agentplane service.
func fakeService(t *testing.T) (addr string, stop func()) {
	t.Helper()
	srv := grpcx.NewServer(prometheus.NewRegistry())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), srv.Stop
}

type stack struct {
	url string
	hub *health.Hub
	gw  *Gateway
}

func startGateway(t *testing.T, targets map[string]string, heartbeat time.Duration, maxStreams int) stack {
	t.Helper()
	return startGatewayWith(t, targets, heartbeat, maxStreams, nil)
}

// startGatewayWith lets configure change the gateway (access control) before it serves.
func startGatewayWith(t *testing.T, targets map[string]string, heartbeat time.Duration, maxStreams int, configure func(*Gateway)) stack {
	t.Helper()
	kc := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	rdb := redis.NewClient(&redis.Options{Addr: rds.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	hub := health.NewHub(64, 64)
	c := health.NewCollector(kc, dyn, hub, health.CollectorOptions{Namespace: "default", Targets: targets, Debounce: 100 * time.Millisecond,
		RedisAddress: rds.Addr, Redis: rdb, RedisInterval: 200 * time.Millisecond, GRPCAddress: "127.0.0.1:50051"})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Run(ctx) }()
	gw := NewGateway(hub, "default", heartbeat, maxStreams, nil)
	if configure != nil {
		configure(gw)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+StreamPath, gw)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return stack{url: srv.URL + StreamPath, hub: hub, gw: gw}
}

// received is one SSE event as a third-party client library parsed it.
type received struct {
	event, id string
	data      health.Event
}

func subscribe(t *testing.T, ctx context.Context, url, lastID string) <-chan received {
	t.Helper()
	client := sse.NewClient(url)
	client.ReconnectStrategy = nil
	if lastID != "" {
		client.LastEventID.Store([]byte(lastID))
	}
	// The stream and its reader stop when ctx is done or the test ends, whichever is first, and
	// the test waits for both (the SSE client never closes raw, so the reader also watches ctx).
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var bad atomic.Value // a bad event, reported by the test itself at its end
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if b, ok := bad.Load().(string); ok {
			t.Errorf("data is not one JSON object: %q", b)
		}
	})
	raw := make(chan *sse.Event, 256)
	wg.Go(func() { _ = client.SubscribeChanRawWithContext(ctx, raw) })
	out := make(chan received, 256)
	wg.Go(func() {
		for {
			var msg *sse.Event
			select {
			case <-ctx.Done():
				return
			case msg = <-raw:
			}
			if msg == nil {
				return
			}
			if len(msg.Data) == 0 {
				continue // the retry hint and keep-alive comments carry no data
			}
			var w health.Event
			if err := json.Unmarshal(msg.Data, &w); err != nil {
				bad.CompareAndSwap(nil, string(msg.Data))
				continue
			}
			select {
			case out <- received{event: string(msg.Event), id: string(msg.ID), data: w}:
			case <-ctx.Done():
				return
			}
		}
	})
	return out
}

// state folds events into component → status, as a client would.
type state map[string]health.Status

func (s state) apply(r received) {
	for _, it := range r.data.Items {
		s[it.Component] = it.Status
	}
}

// waitSettled reads until Redis, the CRDs and the runtimes show as they will stay, and returns
// the event that settled them. Under load the CRD and discovery results can land after Redis's;
// a cursor taken before them would count them as missed deltas of their own.
func waitSettled(t *testing.T, ch <-chan received, s state) received {
	t.Helper()
	return waitFor(t, ch, s, "database and crds healthy, runtime:workflow and runtime:job observed", func(s state) bool {
		return s["database"] == health.Healthy && s["crds"] == health.Healthy && s["runtime:workflow"] == health.Healthy && s["runtime:job"] == health.Healthy
	})
}

func waitFor(t *testing.T, ch <-chan received, s state, what string, cond func(state) bool) received {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-ch:
			s.apply(r)
			if cond(s) {
				return r
			}
		case <-deadline:
			t.Fatalf("%s: never happened; state %v", what, s)
		}
	}
}

// healthyStream starts a gateway following Redis and a fake status-writer, subscribes to its
// stream, and returns once all of it is healthy: the stream, the state folded so far, and how to
// stop the fake service.
func healthyStream(t *testing.T) (<-chan received, state, func()) {
	t.Helper()
	addr, stopSvc := fakeService(t)
	st := startGateway(t, map[string]string{"status-writer": addr}, 30*time.Second, 100)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	events := subscribe(t, ctx, st.url, "")
	s := state{}
	waitFor(t, events, s, "all healthy", func(s state) bool {
		return s["status-writer"] == health.Healthy && s["database"] == health.Healthy && s["namespace"] == health.Healthy
	})
	return events, s, stopSvc
}

func TestLiveStreamFollowsRedisAndServices(t *testing.T) {
	events, s, stopSvc := healthyStream(t)

	// Redis stops: database turns degraded in the live stream, then healthy again after restart.
	if err := rds.Stop(); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, events, s, "database degraded", func(s state) bool { return s["database"] == health.Degraded })
	if r.event != "delta" || r.id == "" || r.data.Cursor != r.id {
		t.Fatalf("delta framing: event=%q id=%q cursor=%q", r.event, r.id, r.data.Cursor)
	}
	if err := rds.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, events, s, "database healthy again", func(s state) bool { return s["database"] == health.Healthy })

	// A stopped service turns unhealthy from its broken health stream (the collector follows
	// each service's health Watch and polls none of them).
	stopSvc()
	waitFor(t, events, s, "status-writer error", func(s state) bool { return s["status-writer"] == health.Error })
}

func TestResumeGetsExactlyTheMissedDeltas(t *testing.T) {
	st := startGateway(t, nil, 30*time.Second, 100)
	ctx, cancel := context.WithCancel(context.Background())
	events := subscribe(t, ctx, st.url, "")
	s := state{}
	last := waitSettled(t, events, s)
	cancel() // disconnect

	// Two changes happen while the client is away.
	if err := rds.Stop(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the hub sees Redis go", func() error {
		if got := find(st.hub.Current().Items, "database"); got != health.Degraded {
			return fmt.Errorf("database is %q", got)
		}
		return nil
	})
	if err := rds.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the hub sees Redis return", func() error {
		if got := find(st.hub.Current().Items, "database"); got != health.Healthy {
			return fmt.Errorf("database is %q", got)
		}
		return nil
	})

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	got := missedDeltas(t, subscribe(t, ctx2, st.url+"?heartbeat=1s", last.id), time.Minute, nil)
	if strings.Join(got, ",") != "database=degraded,database=healthy" {
		t.Fatalf("resumed with %v, want exactly the two missed deltas", got)
	}
}

// TestReconnectingToAnotherReplicaGetsASnapshot: two gateway replicas follow the same cluster
// and Redis. A watcher of replica A that reconnects, with A's cursor as Last-Event-ID, to replica
// B (as a Service may send it) gets B's snapshot of the current state, never B's deltas; back on
// A, the same cursor resumes with exactly the missed deltas.
func TestReconnectingToAnotherReplicaGetsASnapshot(t *testing.T) {
	a := startGateway(t, nil, 30*time.Second, 100)
	b := startGateway(t, nil, 30*time.Second, 100)
	ctx, cancel := context.WithCancel(context.Background())
	last := waitSettled(t, subscribe(t, ctx, a.url, ""), state{})
	cancel()

	if err := rds.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rds.Start() })
	for _, st := range []stack{a, b} {
		testenv.Eventually(t, 30*time.Second, "both replicas see Redis go", func() error {
			if got := find(st.hub.Current().Items, "database"); got != health.Degraded {
				return fmt.Errorf("database is %q", got)
			}
			return nil
		})
	}

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	select {
	case r := <-subscribe(t, ctxB, b.url, last.id):
		if r.event != "snapshot" || find(r.data.Items, "database") != health.Degraded || r.id != b.hub.Current().Cursor {
			t.Fatalf("replica B answered A's cursor with %s %+v (id %q), want its snapshot: database degraded, B's cursor", r.event, r.data.Items, r.id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replica B sent nothing")
	}

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	if got := missedDeltas(t, subscribe(t, ctxA, a.url+"?heartbeat=1s", last.id), time.Minute, nil); strings.Join(got, ",") != "database=degraded" {
		t.Fatalf("replica A resumed its own cursor with %v, want exactly the missed delta", got)
	}
}

// TestSourceFailuresSendErrorEventsAndTheStreamGoesOn: Redis going away and a service's health
// stream breaking each send an error event saying so; the stream goes on, and the component's
// item shows it in a following delta, then the recovery.
func TestSourceFailuresSendErrorEventsAndTheStreamGoesOn(t *testing.T) {
	events, s, stopSvc := healthyStream(t)
	// expect reads until an error event saying says, then until the state holds.
	expect := func(says string, cond func(state) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		sawError := false
		for !sawError || !cond(s) {
			select {
			case r := <-events:
				if r.event == "error" && strings.Contains(r.data.Message, says) {
					if cond(s) {
						t.Fatalf("the error event %q came after the delta it explains", r.data.Message)
					}
					sawError = true
				}
				s.apply(r)
			case <-deadline:
				t.Fatalf("no error event saying %q followed by the change (saw error: %v); state %v", says, sawError, s)
			}
		}
	}
	if err := rds.Stop(); err != nil {
		t.Fatal(err)
	}
	expect("Redis at "+rds.Addr+" is unreachable", func(s state) bool { return s["database"] == health.Degraded })
	stopSvc()
	expect("status-writer: its health stream broke", func(s state) bool { return s["status-writer"] == health.Error })
	// The same stream, still open, shows the recovery.
	if err := rds.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, events, s, "database healthy again on the same stream", func(s state) bool { return s["database"] == health.Healthy })
}

// TestLastEventIDBeatsSinceOnReconnect: an EventSource opened on a ?since= URL reconnects to the
// same URL with the Last-Event-ID it last saw; it must get exactly what it missed after that id,
// not a replay from the URL's older cursor.
func TestLastEventIDBeatsSinceOnReconnect(t *testing.T) {
	st := startGateway(t, nil, 30*time.Second, 100)
	ctx, cancel := context.WithCancel(context.Background())
	events := subscribe(t, ctx, st.url, "")
	s := state{}
	first := waitFor(t, events, s, "database healthy", func(s state) bool { return s["database"] == health.Healthy })
	cancel()
	// The page's URL carries that first cursor; the stream it opens sees Redis go.
	url := st.url + "?since=" + first.id
	ctx, cancel = context.WithCancel(context.Background())
	events = subscribe(t, ctx, url, "")
	if err := rds.Stop(); err != nil {
		t.Fatal(err)
	}
	last := waitFor(t, events, s, "database degraded", func(s state) bool { return s["database"] == health.Degraded })
	cancel() // the connection drops

	// Redis returns while the client is away.
	if err := rds.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "hub sees Redis return", func() error {
		if find(st.hub.Current().Items, "database") != health.Healthy {
			return errors.New("database not healthy yet")
		}
		return nil
	})

	// The reconnect: the same URL, and the header with the last id seen.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	got := missedDeltas(t, subscribe(t, ctx, url, last.id), 20*time.Second,
		func(got []string) bool { return slices.Contains(got, "database=healthy") })
	if strings.Join(got, ",") != "database=healthy" {
		t.Fatalf("resumed with %v, want only what came after Last-Event-ID (database=healthy), not a replay from ?since=", got)
	}
}

// missedDeltas reads a resumed stream as component=status changes, failing on a snapshot (a
// recent cursor must get the missed deltas). It returns once done holds, failing if wait passes
// first; with done nil it collects for wait.
// missedDeltas reads a resumed stream's deltas until done says they are all there or, with done
// nil, until its first heartbeat: the gateway writes the replayed deltas before it, so whatever
// came before the heartbeat is the whole replay. wait only guards against a hang.
func missedDeltas(t *testing.T, ch <-chan received, wait time.Duration, done func([]string) bool) []string {
	t.Helper()
	var got []string
	deadline := time.After(wait)
	for done == nil || !done(got) {
		select {
		case r := <-ch:
			switch r.event {
			case "snapshot":
				t.Fatal("a recent cursor got a snapshot instead of the missed deltas")
			case "delta":
				for _, it := range r.data.Items {
					got = append(got, it.Component+"="+string(it.Status))
				}
			case "heartbeat":
				if done == nil {
					return got
				}
			}
		case <-deadline:
			t.Fatalf("the expected deltas did not come within %s; got %v", wait, got)
		}
	}
	return got
}

func find(items []health.Item, component string) health.Status {
	for _, it := range items {
		if it.Component == component {
			return it.Status
		}
	}
	return ""
}

func TestHeartbeatsArriveOnTime(t *testing.T) {
	// The gateway's default is 10s: heartbeats a second apart can only come from the watch's
	// own ?heartbeat=1s.
	st := startGateway(t, nil, 10*time.Second, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := subscribe(t, ctx, st.url+"?heartbeat=1s", "")
	// The gaps are read from the heartbeats' own generated_at, so a slow reader on a loaded
	// machine does not move them; the bound tells the watch's 1s from the gateway's 10s.
	var at []time.Time
	deadline := time.After(time.Minute)
	for len(at) < 4 {
		select {
		case r := <-events:
			if r.event == "heartbeat" {
				at = append(at, r.data.GeneratedAt)
			}
		case <-deadline:
			t.Fatalf("only %d heartbeats in a minute", len(at))
		}
	}
	if mean := at[3].Sub(at[0]) / 3; mean < 500*time.Millisecond || mean > 5*time.Second {
		t.Fatalf("heartbeats %s apart on average (%v), want about 1s", mean, at)
	}
}

func TestBadRequestsAndTooManyWatchers(t *testing.T) {
	st := startGateway(t, nil, time.Second, 1)
	for _, q := range []string{"?heartbeat=soon", "?heartbeat=1ms", "?format=xml", "?namespace=other"} {
		resp, err := http.Get(st.url + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", q, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.url, nil)
	first, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	second, err := http.Get(st.url)
	if err != nil {
		t.Fatal(err)
	}
	second.Body.Close()
	if second.StatusCode != http.StatusServiceUnavailable || second.Header.Get("Retry-After") == "" {
		t.Fatalf("second watcher: %d Retry-After=%q, want 503 with Retry-After", second.StatusCode, second.Header.Get("Retry-After"))
	}
}

// TestPodProblemsShowInTheStream: a service's Deployment and Pods are watched, so a crash-looping
// Pod shows in the live stream with its reason, and its recovery too.
func TestPodProblemsShowInTheStream(t *testing.T) {
	st := startGateway(t, nil, 30*time.Second, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := subscribe(t, ctx, st.url, "")
	kc := kubernetes.NewForConfigOrDie(env.Config)
	labels := map[string]string{"app.kubernetes.io/part-of": "agentplane", "app.kubernetes.io/name": "crashy"}
	one := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "crashy", Namespace: "default", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "crashy"}}}}}}
	if _, err := kc.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = kc.AppsV1().Deployments("default").Delete(context.Background(), "crashy", metav1.DeleteOptions{})
	}()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "crashy-1", Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "crashy"}}}}
	pod, err := kc.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = kc.CoreV1().Pods("default").Delete(context.Background(), "crashy-1", *metav1.NewDeleteOptions(0))
	}()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "crashy", RestartCount: 4,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s"}}}}
	if pod, err = kc.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	waitForItem := func(what string, cond func(health.Item) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case r := <-events:
				for _, it := range r.data.Items {
					if it.Component == "crashy" && cond(it) {
						msg = it.Message
						return
					}
				}
			case <-deadline:
				t.Fatalf("%s: never seen", what)
			}
		}
	}
	waitForItem("crash loop", func(it health.Item) bool {
		return it.Status == health.Error && strings.Contains(it.Message, "crashy-1: CrashLoopBackOff")
	})
	if !strings.Contains(msg, "0/1 replicas ready") {
		t.Fatalf("message %q does not say the replicas", msg)
	}

	// The container comes up: the problem leaves the message.
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	if _, err := kc.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForItem("recovery", func(it health.Item) bool { return !strings.Contains(it.Message, "CrashLoopBackOff") })
}

// TestHTTP2StreamsToo: an HTTP/2 connection cannot be taken over, so its watch is served by a
// goroutine of its own; it streams the same events.
func TestHTTP2StreamsToo(t *testing.T) {
	hub := health.NewHub(64, 64)
	hub.Update([]health.Item{{Component: "database", Status: health.Healthy}})
	gw := NewGateway(hub, "default", time.Second, 10, nil)
	srv := httptest.NewUnstartedServer(gw)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+StreamPath+"?heartbeat=1s", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	lines := bufio.NewScanner(resp.Body)
	var events []string
	for lines.Scan() && len(events) < 3 {
		if e, ok := strings.CutPrefix(lines.Text(), "event: "); ok {
			events = append(events, e)
			if e == "snapshot" { // a change once the client holds the snapshot
				hub.Update([]health.Item{{Component: "database", Status: health.Degraded}})
			}
		}
	}
	if strings.Join(events, ",") != "snapshot,delta,heartbeat" {
		t.Fatalf("events %v, want snapshot, delta, heartbeat", events)
	}
	if gw.DetachedStreams() != 0 {
		t.Fatal("an HTTP/2 stream was taken over")
	}
}

// TestHTTP1WatchesHoldNoGoroutineAndCloseOnShutdown: an HTTP/1.1 watch is taken over from the
// HTTP server (through the tracing wrapper the service puts around the handler); CloseStreams
// ends it and frees its slot.
// A watch over HTTP/1.1 holds no goroutine in the gateway: 50 open watches, read by a client
// that itself runs no goroutine (raw TCP, read in the test), leave the process's goroutine count
// where it was; a handler that blocked per watch would add at least 50.
func TestOpenHTTP1WatchesAddNoGoroutine(t *testing.T) {
	const watches = 50
	hub := health.NewHub(64, 64)
	hub.Update([]health.Item{{Component: "database", Status: health.Healthy}})
	gw := NewGateway(hub, "default", 5*time.Minute, watches, nil)
	srv := httptest.NewServer(gw)
	defer srv.Close()
	defer gw.CloseStreams()
	warm, err := net.Dial("tcp", srv.Listener.Addr().String()) // the server's accept loop is running
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	before := runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range watches {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: gateway\r\nAccept: text/event-stream\r\n\r\n", StreamPath); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read the stream: %v", err)
			}
			if strings.TrimSpace(line) == "event: snapshot" {
				break
			}
		}
	}
	testenv.Eventually(t, 10*time.Second, "the watches detached", func() error {
		if gw.DetachedStreams() != watches {
			return fmt.Errorf("detached %d of %d", gw.DetachedStreams(), watches)
		}
		if grown := runtime.NumGoroutine() - before; grown >= watches/2 {
			return fmt.Errorf("%d open watches added %d goroutines", watches, grown)
		}
		return nil
	})
}

func TestHTTP1WatchesHoldNoGoroutineAndCloseOnShutdown(t *testing.T) {
	hub := health.NewHub(64, 64)
	hub.Update([]health.Item{{Component: "database", Status: health.Healthy}})
	gw := NewGateway(hub, "default", 30*time.Second, 1, nil)
	srv := httptest.NewServer(otelhttp.NewHandler(gw, "stream"))
	defer srv.Close()
	resp, err := http.Get(srv.URL + StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Retry") != "1000" {
		t.Fatalf("headers %v", resp.Header)
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() && lines.Text() != "event: snapshot" {
	}
	if gw.DetachedStreams() != 1 || hub.Sinks() != 1 {
		t.Fatalf("detached %d, sinks %d, want the watch taken over", gw.DetachedStreams(), hub.Sinks())
	}
	gw.CloseStreams()
	for lines.Scan() {
	}
	if gw.DetachedStreams() != 0 || hub.Sinks() != 0 {
		t.Fatalf("after CloseStreams: detached %d, sinks %d", gw.DetachedStreams(), hub.Sinks())
	}
	// A shutting-down gateway takes no new watch.
	again, err := http.Get(srv.URL + StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusServiceUnavailable || again.Header.Get("Retry-After") == "" {
		t.Fatalf("a watch after CloseStreams: %d, want 503 with Retry-After", again.StatusCode)
	}
	hs := httptest.NewServer(NewGateway(hub, "default", time.Second, 1, nil))
	defer hs.Close()
	head, err := http.Head(hs.URL + StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Body.Close()
	if head.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("HEAD: %d, want 405", head.StatusCode)
	}
}

// TestAWatcherThatClosesTLSIsReleased: over TLS a client's close begins with a close_notify
// record, so the socket holds bytes and a peek alone never sees the end. Here the client sends
// close_notify and keeps its TCP socket open and reading (as kubectl port-forward does between
// a closed local connection and the pod), so the gateway's keep-alive writes still succeed: only
// reading the record tells it the watcher has gone.
func TestAWatcherThatClosesTLSIsReleased(t *testing.T) {
	hub := health.NewHub(64, 64)
	hub.Update([]health.Item{{Component: "database", Status: health.Healthy}})
	gw := NewGateway(hub, "default", 5*time.Minute, 1, nil)
	gw.keepAlive = 100 * time.Millisecond
	srv := httptest.NewUnstartedServer(gw)
	srv.StartTLS() // HTTP/1.1 only: the watch is taken over
	defer srv.Close()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test server's own certificate
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: gateway\r\nAccept: text/event-stream\r\n\r\n", StreamPath); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("the watch's status line: %q %v", line, err)
	}
	testenv.Eventually(t, 10*time.Second, "the watch taken over", func() error {
		if n := gw.DetachedStreams(); n != 1 {
			return fmt.Errorf("%d detached streams", n)
		}
		return nil
	})
	if err := conn.CloseWrite(); err != nil { // close_notify; the TCP connection stays open
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }() // the client keeps reading what is written
	testenv.Eventually(t, 30*time.Second, "the closed watcher's slot freed", func() error {
		if n := gw.DetachedStreams(); n != 0 {
			return fmt.Errorf("%d detached streams (keep-alives every 100ms still written)", n)
		}
		return nil
	})
}

// TestAVanishedWatcherIsReleased: nothing reads a taken-over connection, so the gateway peeks at
// it every keep-alive interval; a client that went away frees its slot then, in either format.
func TestAVanishedWatcherIsReleased(t *testing.T) {
	for _, format := range []string{"json", "ndjson"} {
		t.Run(format, func(t *testing.T) {
			hub := health.NewHub(64, 64)
			hub.Update([]health.Item{{Component: "database", Status: health.Healthy}})
			gw := NewGateway(hub, "default", 5*time.Minute, 1, nil)
			gw.keepAlive = 100 * time.Millisecond
			srv := httptest.NewServer(gw)
			defer srv.Close()
			resp, err := http.Get(srv.URL + StreamPath + "?format=" + format)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			if gw.DetachedStreams() != 1 {
				t.Fatalf("detached %d, want 1", gw.DetachedStreams())
			}
			resp.Body.Close() // the client goes away without a word
			// Heartbeats are 5m apart: freed within the minute means the gateway noticed the
			// close itself, not on its next write.
			testenv.Eventually(t, time.Minute, "the vanished watcher's slot freed", func() error {
				if n := gw.DetachedStreams(); n != 0 {
					return fmt.Errorf("%d detached streams", n)
				}
				return nil
			})
			again, err := http.Get(srv.URL + StreamPath)
			if err != nil {
				t.Fatal(err)
			}
			again.Body.Close()
			if again.StatusCode != http.StatusOK {
				t.Fatalf("the slot was not freed: %d", again.StatusCode)
			}
		})
	}
}
