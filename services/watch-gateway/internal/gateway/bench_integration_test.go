//go:build integration

package gateway

// BenchmarkSSEWatchers is issue 5's benchmark: 10,000 concurrent SSE watchers of one gateway on
// this machine. It measures, against a baseline run in the same process on the same machine:
//
//   - delta dispatch latency, from the delta's generation (Hub.Update) to its arrival at each
//     watcher's socket reader, p50 and p99 over every watcher and delta;
//   - memory per watcher: the gateway process's heap and stacks with the watchers connected,
//     minus before, divided by the watchers;
//   - API-server requests per minute: one collector feeding every watcher, versus each watcher
//     polling the one-shot status (agentctl status in kube mode: a collector run until it
//     settles) every 5 s.
//
// The watchers live in a child process (this test binary, TestBenchSSEClient) so that their
// memory is not counted; they read raw sockets. The baseline is the smallest SSE server that
// does the same job: net/http, a goroutine and a channel per watcher, each delta encoded once.
//
//	go test -tags integration -run '^$' -bench SSEWatchers -benchtime 1x ./services/watch-gateway/internal/gateway/
//
// AGENTPLANE_BENCH_WATCHERS changes the number of watchers (default 10000).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/health"
)

const (
	benchDeltas   = 20
	benchInterval = 250 * time.Millisecond
	benchMarker   = "bench-t0="
)

func benchWatchers() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTPLANE_BENCH_WATCHERS")); err == nil && n > 0 {
		return n
	}
	return 10000
}

// countingTransport counts the requests a client sends to the API server.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

func countingClients(n *atomic.Int64) (kubernetes.Interface, dynamic.Interface) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // never throttle: count what the code asks for
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt: rt, n: n} })
	return kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
}

// phaseResult is what one server under 10,000 watchers measured.
type phaseResult struct {
	P50, P99, Max     time.Duration
	Received, Want    int
	BytesPerWatcher   float64
	GoroutinesPerConn float64
}

func BenchmarkSSEWatchers(b *testing.B) {
	n := benchWatchers()
	for i := 0; i < b.N; i++ {
		// The gateway, with its collector running for the whole phase so that its API requests
		// cover the same wall time as the watching.
		var watchRequests atomic.Int64
		kc, dyn := countingClients(&watchRequests)
		collectorHub := health.NewHub(1024, 64)
		ctx, cancel := context.WithCancel(context.Background())
		started := time.Now()
		go func() {
			_ = health.NewCollector(kc, dyn, collectorHub, health.CollectorOptions{Namespace: "default", Debounce: 500 * time.Millisecond}).Run(ctx)
		}()
		<-collectorHub.Ready()

		hub := health.NewHub(1024, 64)
		base := collectorHub.Current().Items
		hub.Update(base)
		gw := NewGateway(hub, "default", 30*time.Second, 2*n, nil)
		gateway := runBenchPhase(b, "gateway", gw, n, func(i int, t0 time.Time) { hub.Update(benchItems(base, i, t0)) })
		watchingMinutes := time.Since(started).Minutes()
		cancel()

		// The baseline: the smallest goroutine-per-watcher SSE server.
		bl := newBaselineServer(base)
		baseline := runBenchPhase(b, "baseline", bl, n, func(i int, t0 time.Time) { bl.publish(benchItems(base, i, t0)) })

		// Polling: one one-shot status in kube mode, as agentctl runs it, counted.
		var oneShot atomic.Int64
		pkc, pdyn := countingClients(&oneShot)
		if err := oneShotStatus(pkc, pdyn); err != nil {
			b.Fatal(err)
		}
		watchingPerMin := float64(watchRequests.Load()) / watchingMinutes
		pollingPerMin := float64(n) * (60.0 / 5) * float64(oneShot.Load())

		b.ReportMetric(ratio(gateway.P50, baseline.P50), "p50/baseline")
		b.ReportMetric(ratio(gateway.P99, baseline.P99), "p99/baseline")
		b.ReportMetric(gateway.BytesPerWatcher/baseline.BytesPerWatcher, "mem/baseline")
		b.ReportMetric(pollingPerMin/watchingPerMin, "polling/watching")
		b.ReportMetric(float64(gateway.P99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(gateway.BytesPerWatcher/1024, "KiB/watcher")
		fmt.Printf("SSE watchers: %d, %d deltas each, %s apart\n", n, benchDeltas, benchInterval)
		fmt.Printf("%-9s %10s %10s %10s %12s %14s %10s\n", "server", "p50", "p99", "max", "received", "KiB/watcher", "gor/conn")
		for _, r := range []struct {
			name string
			r    phaseResult
		}{{"gateway", gateway}, {"baseline", baseline}} {
			fmt.Printf("%-9s %10s %10s %10s %5d/%-6d %14.1f %10.2f\n", r.name, r.r.P50.Round(10*time.Microsecond), r.r.P99.Round(10*time.Microsecond),
				r.r.Max.Round(10*time.Microsecond), r.r.Received, r.r.Want, r.r.BytesPerWatcher/1024, r.r.GoroutinesPerConn)
		}
		fmt.Printf("ratios gateway/baseline: p50 %.2f, p99 %.2f, memory %.2f (goals: p99 < 100ms, < 20 KiB/watcher)\n",
			ratio(gateway.P50, baseline.P50), ratio(gateway.P99, baseline.P99), gateway.BytesPerWatcher/baseline.BytesPerWatcher)
		fmt.Printf("API requests/min: watching %.1f (one collector, %d requests in %.2f min), polling every 5s %.0f (%d requests per one-shot x %d watchers x 12/min): polling/watching %.0f (goal >= 100)\n",
			watchingPerMin, watchRequests.Load(), watchingMinutes, pollingPerMin, oneShot.Load(), n, pollingPerMin/watchingPerMin)
		if gateway.Received < gateway.Want || baseline.Received < baseline.Want {
			b.Fatalf("deltas lost: gateway %d/%d, baseline %d/%d", gateway.Received, gateway.Want, baseline.Received, baseline.Want)
		}
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// benchItems changes one component per delta, carrying the generation time in its message.
func benchItems(base []health.Item, i int, t0 time.Time) []health.Item {
	items := slices.Clone(base)
	st := health.Degraded
	if i%2 == 1 {
		st = health.Healthy
	}
	items = append(items, health.Item{Component: "bench", Namespace: "default", Status: st, Message: benchMarker + strconv.FormatInt(t0.UnixNano(), 10)})
	return items
}

func liveBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// runBenchPhase serves handler on loopback, connects n watchers from a child process, measures
// memory, publishes benchDeltas deltas and collects the watchers' latencies.
func runBenchPhase(b *testing.B, name string, handler http.Handler, n int, publish func(i int, t0 time.Time)) phaseResult {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}()
	before := liveBytes()
	gBefore := runtime.NumGoroutine()

	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchSSEClient$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "BENCH_SSE_URL=http://"+l.Addr().String()+StreamPath,
		"BENCH_SSE_WATCHERS="+strconv.Itoa(n), "BENCH_SSE_DELTAS="+strconv.Itoa(benchDeltas))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) string {
		for lines.Scan() {
			if v, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return v
			}
		}
		b.Fatalf("%s: the watcher process ended before %q", name, prefix)
		return ""
	}
	next("BENCH ready")
	after := liveBytes()
	gAfter := runtime.NumGoroutine()

	for i := range benchDeltas {
		publish(i, time.Now())
		time.Sleep(benchInterval)
	}
	_ = stdin.Close() // the watchers report once they have every delta, or now
	var r phaseResult
	if err := json.Unmarshal([]byte(next("BENCH result ")), &r); err != nil {
		b.Fatal(err)
	}
	r.BytesPerWatcher = (float64(after) - float64(before)) / float64(n)
	r.GoroutinesPerConn = float64(gAfter-gBefore) / float64(n)
	return r
}

// oneShotStatus is agentctl's kube-mode one-shot: a collector run until it has published and
// gone quiet.
func oneShotStatus(kc kubernetes.Interface, dyn dynamic.Interface) error {
	hub := health.NewHub(16, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, sub := hub.Subscribe("", true)
	defer sub.Close()
	go func() {
		_ = health.NewCollector(kc, dyn, hub, health.CollectorOptions{Namespace: "default", Debounce: 300 * time.Millisecond}).Run(ctx)
	}()
	select {
	case <-sub.Events():
	case <-time.After(20 * time.Second):
		return errors.New("the one-shot status never came")
	}
	time.Sleep(time.Second) // agentctl waits for a quiet second too
	return nil
}

// baselineServer is the smallest SSE server doing the same job: a goroutine and a buffered
// channel per watcher, each delta encoded once and written as is.
type baselineServer struct {
	mu       sync.Mutex
	snapshot []byte
	subs     map[chan []byte]struct{}
}

func newBaselineServer(items []health.Item) *baselineServer {
	data, _ := json.Marshal(health.Event{Type: health.Snapshot, GeneratedAt: time.Now(), Items: items})
	return &baselineServer{snapshot: []byte("event: snapshot\ndata: " + string(data) + "\n\n"), subs: map[chan []byte]struct{}{}}
}

func (s *baselineServer) publish(items []health.Item) {
	data, _ := json.Marshal(health.Event{Type: health.Delta, GeneratedAt: time.Now(), Items: items[len(items)-1:]})
	msg := []byte("event: delta\ndata: " + string(data) + "\n\n")
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- msg:
		default:
		}
	}
}

func (s *baselineServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, 64)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	defer func() { s.mu.Lock(); delete(s.subs, ch); s.mu.Unlock() }()
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	_, _ = w.Write(s.snapshot)
	f.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg := <-ch:
			if _, err := w.Write(msg); err != nil {
				return
			}
			f.Flush()
		}
	}
}

// TestBenchSSEClient is the watcher process of BenchmarkSSEWatchers; on its own it skips.
func TestBenchSSEClient(t *testing.T) {
	url := os.Getenv("BENCH_SSE_URL")
	if url == "" {
		t.Skip("the watcher side of BenchmarkSSEWatchers")
	}
	n, _ := strconv.Atoi(os.Getenv("BENCH_SSE_WATCHERS"))
	deltas, _ := strconv.Atoi(os.Getenv("BENCH_SSE_DELTAS"))
	hostPath := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(hostPath, "/")
	path = "/" + path

	var ready, failed, received atomic.Int64
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128) // connect at a steady pace: the accept backlog is finite
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", host)
			if err != nil {
				failed.Add(1)
				<-sem
				t.Errorf("watcher %d: %v", i, err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, host)
			resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				failed.Add(1)
				<-sem
				t.Errorf("watcher %d: %v %v", i, err, resp)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			snapshot := false
			for sc.Scan() {
				line := sc.Text()
				if !strings.HasPrefix(line, "data: ") {
					continue
				}
				now := time.Now()
				if !snapshot {
					snapshot = true
					ready.Add(1)
					<-sem
					continue
				}
				_, rest, ok := strings.Cut(line, benchMarker)
				if !ok {
					continue
				}
				end := strings.IndexByte(rest, '"')
				t0, err := strconv.ParseInt(rest[:max(end, 0)], 10, 64)
				if err != nil {
					continue
				}
				mu.Lock()
				all = append(all, now.Sub(time.Unix(0, t0)))
				mu.Unlock()
				if received.Add(1) == int64(n*deltas) {
					return
				}
			}
		}()
	}
	for ready.Load()+failed.Load() < int64(n) {
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("BENCH ready")
	// Wait for stdin to close (the publisher is done), then give stragglers a moment.
	_, _ = io.Copy(io.Discard, os.Stdin)
	deadline := time.Now().Add(10 * time.Second)
	for received.Load() < int64(n*deltas) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	all = slices.Clone(all)
	mu.Unlock()
	slices.Sort(all)
	r := phaseResult{Received: len(all), Want: n * deltas}
	if len(all) > 0 {
		r.P50, r.P99, r.Max = all[len(all)/2], all[len(all)*99/100], all[len(all)-1]
	}
	out, _ := json.Marshal(r)
	fmt.Println("BENCH result " + string(out))
}
