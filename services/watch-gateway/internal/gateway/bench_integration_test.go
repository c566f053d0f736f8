//go:build integration

package gateway

// BenchmarkSSEWatchers is issue 5's benchmark, grown by issue 36: 100,000 concurrent SSE watchers
// of one gateway (as many as the open-file limit allows where it is lower: benchWatchers). It measures, against a baseline run in the same process on the
// same machine:
//
//   - delta dispatch latency, from the delta's generation (Hub.Update) to its arrival at each
//     watcher's socket reader, p50 and p99 over every watcher and delta;
//   - memory per watcher: the gateway process's resident set (VmRSS, after returning freed memory
//     to the system) with the watchers connected, minus before, divided by the watchers; and its
//     Go heap and stacks the same way;
//   - API-server requests per minute: one collector feeding every watcher (counted over its first
//     minute, initial lists included), versus each watcher polling the one-shot status
//     (agentctl status in kube mode: a collector run until it settles) every 5 s.
//
// The watchers live in a child process (this test binary, TestBenchSSEClient) so that their
// memory is not counted; they read raw sockets. Both processes raise their open-file limit to what
// the watchers need (a process with CAP_SYS_RESOURCE may raise the hard limit), and the watchers
// connect from several loopback source addresses (one per 20,000 watchers), since one
// source/destination pair has only about 28,000 ephemeral ports. Each phase has addresses of its
// own (127.0.P.2 and up for phase P): the ports of the phase before stay in TIME_WAIT for a
// minute, and a dial bound to a source address cannot take one of them (at 17,000 watchers from
// one address the second phase found about 6,000 ports free). A phase in which any watcher could
// not connect fails the benchmark: its figures would be of fewer watchers than the others'.
// Deltas are published benchInterval apart per 10,000 watchers, so that one delta's fan-out ends
// before the next begins on every server (the floor's publish waits for its own; the others'
// would queue). The baseline is the smallest SSE server that does the same job: net/http, a
// goroutine and a channel per watcher, each delta encoded once.
//
//	go test -tags integration -run '^$' -bench SSEWatchers -benchtime 1x ./services/watch-gateway/internal/gateway/
//
// AGENTPLANE_BENCH_WATCHERS changes the number of watchers (default 100000).

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
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/testenv"
)

const (
	benchDeltas   = 20
	benchInterval = 250 * time.Millisecond
	benchMarker   = "bench-t0="
)

// benchWatchers is AGENTPLANE_BENCH_WATCHERS, else 100,000, or fewer when the open-file hard limit
// is lower and cannot be raised (without CAP_SYS_RESOURCE; the runner here has a hard limit of
// 20,000 and cannot raise it, nor can Docker's runc for a container): as many as one process may
// hold sockets for, in whole thousands. The goal watchers>=100000 says whether it was reached.
func benchWatchers() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTPLANE_BENCH_WATCHERS")); err == nil && n > 0 {
		return n
	}
	const want = 100000
	if raiseFileLimit(want+fileSlack) == nil {
		return want
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max < 2*fileSlack {
		return 1000
	}
	return int(min(lim.Max-fileSlack, want)/1000) * 1000 //nolint:gosec // at most want: no overflow
}

// fileSlack is the open files a bench process needs besides the watchers' sockets.
const fileSlack = 2048

// watchersPerSource is how many watchers connect from one loopback source address.
const watchersPerSource = 20000

// deltaInterval is the time between two deltas for n watchers: benchInterval per 10,000.
func deltaInterval(n int) time.Duration {
	return benchInterval * time.Duration(max(1, (n+9999)/10000))
}

// raiseFileLimit makes this process's open-file limit at least need, raising the hard limit too
// when it is lower (root may); the watcher process it starts inherits it.
func raiseFileLimit(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	want := uint64(max(need, 0))
	if lim.Cur >= want {
		return nil
	}
	lim.Cur, lim.Max = want, max(lim.Max, want)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("the open-file limit is too low for %d sockets and cannot be raised (%w): run as root, or raise `ulimit -Hn`", need, err)
	}
	return nil
}

// residentBytes is this process's resident set (VmRSS) after the runtime has returned the memory
// it freed to the system.
func residentBytes() uint64 {
	debug.FreeOSMemory()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kib * 1024
		}
	}
	return 0
}

// countingClients count every request they send to the API server in n.
func countingClients(n *atomic.Int64) (kubernetes.Interface, dynamic.Interface) {
	cfg := testenv.CountRequests(env.Config, n, nil)
	cfg.QPS, cfg.Burst = -1, 0 // never throttle: count what the code asks for
	return kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
}

// phaseResult is what one server under its watchers measured: end to end (generation to the
// watcher's read) and, on the server, generation to the write into the watcher's socket.
type phaseResult struct {
	P50, P99, Max     time.Duration
	SrvP50, SrvP99    time.Duration
	Received, Want    int
	BytesPerWatcher   float64 // Go heap and stacks
	RSSPerWatcher     float64 // the process's resident set
	GoroutinesPerConn float64
}

// With two CPUs or more and taskset(1) at hand, the gateway (this process) runs on the first CPU
// and the watcher process on the others, so the load generator does not compete with the system
// under test; both servers get the same split. watcherCPUs is the watcher process's CPU list, ""
// while nothing is pinned.
var watcherCPUs string

func pinCPUs(b *testing.B) (restore func()) {
	cpus, undo := testenv.PinApart(b)
	watcherCPUs = cpus
	return func() { undo(); watcherCPUs = "" }
}

func BenchmarkSSEWatchers(b *testing.B) {
	n := benchWatchers()
	if err := raiseFileLimit(n + fileSlack); err != nil {
		b.Fatal(err)
	}
	if n < 100000 {
		var lim syscall.Rlimit
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		b.Logf("%d watchers, not 100,000: the open-file hard limit is %d and this process may not raise it (no CAP_SYS_RESOURCE)", n, lim.Max)
	}
	defer pinCPUs(b)()
	for i := 0; i < b.N; i++ {
		// The gateway, with its collector running for the whole phase so that its API requests
		// cover the same wall time as the watching.
		var watchRequests atomic.Int64
		kc, dyn := countingClients(&watchRequests)
		reads0 := metricReads.Load()
		served0, open0 := apiServerRequests(b)
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
		gwDispatch := &durations{}
		observe := hub.OnDispatch
		hub.OnDispatch = func(d time.Duration) { observe(d); gwDispatch.add(d) }
		gateway := runBenchPhase(b, "gateway", 0, gw, n, func(i int, t0 time.Time) { hub.Update(benchItems(base, i, t0)) })
		gateway.SrvP50, gateway.SrvP99 = gwDispatch.percentiles()
		gw.CloseStreams() // the watcher process has gone; close the sockets it left

		// The baseline: the smallest goroutine-per-watcher SSE server.
		bl := newBaselineServer(base)
		baseline := runBenchPhase(b, "baseline", 1, bl, n, func(i int, t0 time.Time) { bl.publish(benchItems(base, i, t0), t0) })
		baseline.SrvP50, baseline.SrvP99 = bl.dispatched.percentiles()

		// The floor: the same bytes written straight to each watcher's socket, nothing else.
		fl := &floorServer{snapshot: bl.snapshot}
		floor := runBenchPhase(b, "floor", 2, fl, n, func(i int, t0 time.Time) { fl.publish(benchItems(base, i, t0), t0) })
		floor.SrvP50, floor.SrvP99 = fl.dispatched.percentiles()
		fl.close()

		// Watching: the collector's requests over a whole minute (at least), as the API server
		// counted them (apiserver_request_total counts a watch when it ends: the collector is
		// stopped and its watches awaited before the count is read).
		if os.Getenv("AGENTPLANE_BENCH_QUICK") == "" {
			time.Sleep(time.Until(started.Add(time.Minute))) // the measurement window, not synchronisation
		}
		watchingMinutes := time.Since(started).Minutes()
		cancel()
		awaitWatchesClosed(b, open0)
		reads1 := metricReads.Load()
		served1, _ := apiServerRequests(b)
		watchingPerMin := (served1 - served0 - float64(reads1-reads0)) / watchingMinutes // less the metric reads between

		// Polling: benchPollers clients each running agentctl's kube-mode one-shot every 5 s for a
		// minute, counted by the API server the same way. Fewer pollers than watchers: the
		// comparison understates polling's cost.
		pollers := min(n, benchPollers)
		var oneShot atomic.Int64
		pkc, pdyn := countingClients(&oneShot)
		pollMinutes := pollFor(b, pkc, pdyn, pollers, time.Minute)
		awaitWatchesClosed(b, open0)
		reads2 := metricReads.Load()
		served2, _ := apiServerRequests(b)
		pollingPerMin := (served2 - served1 - float64(reads2-reads1)) / pollMinutes

		b.ReportMetric(ratio(gateway.SrvP50, baseline.SrvP50), "dispatch-p50/baseline")
		b.ReportMetric(ratio(gateway.SrvP99, baseline.SrvP99), "dispatch-p99/baseline")
		b.ReportMetric(float64(gateway.SrvP99.Microseconds())/1000, "dispatch-p99-ms")
		b.ReportMetric(ratio(gateway.P99, baseline.P99), "e2e-p99/baseline")
		b.ReportMetric(ratio(gateway.SrvP99, floor.SrvP99), "dispatch-p99/floor")
		b.ReportMetric(gateway.BytesPerWatcher/baseline.BytesPerWatcher, "mem/baseline")
		// Per client on each side: a polling client's own requests, against a watcher's share of
		// the one collector's requests. Both are measured; no count of clients divides only one side.
		pollingPerClient := pollingPerMin / 60 / float64(pollers)
		watchingPerClient := watchingPerMin / 60 / float64(n)
		perClient := pollingPerClient / watchingPerClient
		b.ReportMetric(pollingPerClient, "polling-requests/s/client")
		b.ReportMetric(watchingPerClient, "watching-requests/s/client")
		b.ReportMetric(perClient, "polling/watching-per-client")
		b.ReportMetric(float64(pollers), "pollers")
		b.ReportMetric(watchingPerMin, "watching-requests/min")
		b.ReportMetric(pollingPerMin, "polling-requests/min")
		b.ReportMetric(gateway.BytesPerWatcher/1024, "KiB/watcher")
		b.ReportMetric(gateway.RSSPerWatcher/1024, "rss-KiB/watcher")
		b.ReportMetric(float64(n), "watchers")
		testenv.Goal(b, "watchers>=100000", n >= 100000 && gateway.Received == gateway.Want)
		testenv.Goal(b, "rss-KiB/watcher<=2", gateway.RSSPerWatcher/1024 <= 2)
		testenv.Goal(b, "dispatch-p99/floor<=1.1", ratio(gateway.SrvP99, floor.SrvP99) <= 1.1)
		testenv.Goal(b, "polling/watching-per-client>=100", perClient >= 100)
		placement := "gateway and watchers share every CPU"
		if watcherCPUs != "" {
			placement = "gateway on CPU 0, watchers on CPUs " + watcherCPUs
		}
		fmt.Printf("SSE watchers: %d from %d loopback source addresses per phase, %d deltas each, %s apart; %s; GOMAXPROCS %d, fan-out workers %d (gateway and floor)\n",
			n, sources(n), benchDeltas, deltaInterval(n), placement, runtime.GOMAXPROCS(0), health.FanoutWorkers())
		fmt.Printf("%-9s %13s %13s %10s %10s %10s %14s %14s %14s %10s\n", "server", "dispatch p50", "dispatch p99", "e2e p50", "e2e p99", "e2e max", "received", "KiB/watcher", "RSS KiB/w", "gor/conn")
		for _, r := range []struct {
			name string
			r    phaseResult
		}{{"gateway", gateway}, {"baseline", baseline}, {"floor", floor}} {
			fmt.Printf("%-9s %13s %13s %10s %10s %10s %7d/%-6d %14.2f %14.2f %10.2f\n", r.name, r.r.SrvP50.Round(10*time.Microsecond), r.r.SrvP99.Round(10*time.Microsecond),
				r.r.P50.Round(10*time.Microsecond), r.r.P99.Round(10*time.Microsecond), r.r.Max.Round(10*time.Microsecond),
				r.r.Received, r.r.Want, r.r.BytesPerWatcher/1024, r.r.RSSPerWatcher/1024, r.r.GoroutinesPerConn)
		}
		fmt.Printf("ratios gateway/baseline: dispatch p50 %.2f, dispatch p99 %.2f, e2e p50 %.2f, e2e p99 %.2f, memory %.2f (goals: 100,000 watchers, <= 2 KiB of RSS each, dispatch p99 <= 1.1x the floor's)\n",
			ratio(gateway.SrvP50, baseline.SrvP50), ratio(gateway.SrvP99, baseline.SrvP99), ratio(gateway.P50, baseline.P50), ratio(gateway.P99, baseline.P99),
			gateway.BytesPerWatcher/baseline.BytesPerWatcher)
		fmt.Printf("ratios gateway/floor: dispatch p50 %.2f, dispatch p99 %.2f\n", ratio(gateway.SrvP50, floor.SrvP50), ratio(gateway.SrvP99, floor.SrvP99))
		fmt.Printf("API requests/min, counted by the API server: watching %.1f (one collector for %d watchers, %.2f min; %d requests sent), "+
			"polling every 5s %.0f (%d pollers, %.2f min; %d requests sent); per client and second: polling %.4f, watching %.6f, "+
			"polling/watching per client %.0f (goal >= 100)\n",
			watchingPerMin, n, watchingMinutes, watchRequests.Load(), pollingPerMin, pollers, pollMinutes, oneShot.Load(),
			pollingPerClient, watchingPerClient, perClient)
		// Only the gateway losing a delta fails the benchmark (a watcher of any phase that could
		// not connect already has). The baseline's losses, deltas dropped when a watcher's channel
		// is full, are one of its findings (reported, as baseline-received/sent).
		b.ReportMetric(float64(baseline.Received)/float64(baseline.Want), "baseline-received/sent")
		if gateway.Received < gateway.Want {
			b.Fatalf("deltas lost by the gateway: %d/%d (the baseline received %d/%d)", gateway.Received, gateway.Want, baseline.Received, baseline.Want)
		}
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// sources is how many loopback source addresses n watchers connect from.
func sources(n int) int { return max(1, (n+watchersPerSource-1)/watchersPerSource) }

// benchPollers is how many clients poll in the polling measurement.
const benchPollers = 100

// pollFor runs pollers clients, each running agentctl's kube-mode one-shot every 5 s, for d, and
// returns the minutes it took until every poller had stopped.
func pollFor(b *testing.B, kc kubernetes.Interface, dyn dynamic.Interface, pollers int, d time.Duration) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	for range pollers {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				if err := oneShotStatus(kc, dyn); err != nil {
					failed.CompareAndSwap(nil, err.Error())
					return
				}
				if time.Since(start) >= d-5*time.Second {
					return
				}
				<-tick.C
			}
		})
	}
	wg.Wait()
	if f, ok := failed.Load().(string); ok {
		b.Fatalf("a poller's one-shot failed: %s", f)
	}
	return time.Since(start).Minutes()
}

// metricReads counts apiServerRequests' own GETs of /metrics, which the API server counts too (each
// one in the next reading): the measurements subtract those made between their two readings.
var metricReads atomic.Int64

// apiServerRequests reads the API server's own count of the requests it has served
// (apiserver_request_total, every verb and code) and of the long-running ones still open
// (apiserver_longrunning_requests).
func apiServerRequests(b *testing.B) (served, open float64) {
	b.Helper()
	kc := kubernetes.NewForConfigOrDie(env.Config)
	metricReads.Add(1)
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("read the API server's metrics: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, _, ok := strings.Cut(line, "{")
		if !ok || (name != "apiserver_request_total" && name != "apiserver_longrunning_requests") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			b.Fatalf("API server metric %q: %v", line, err)
		}
		if name == "apiserver_request_total" {
			served += v
		} else {
			open += v
		}
	}
	if served == 0 {
		b.Fatal("the API server reported no apiserver_request_total")
	}
	return served, open
}

// awaitWatchesClosed waits until the API server has no more long-running requests open than
// before the measurement, so that the watches of stopped clients are counted as served.
func awaitWatchesClosed(b *testing.B, before float64) {
	b.Helper()
	testenv.Eventually(b, time.Minute, "the stopped clients' watches closed", func() error {
		if _, open := apiServerRequests(b); open > before {
			return fmt.Errorf("%.0f long-running requests open, %.0f before", open, before)
		}
		return nil
	})
}

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

// runBenchPhase serves handler on loopback, connects n watchers from a child process (from phase's
// own source addresses), measures memory, publishes benchDeltas deltas and collects the watchers'
// latencies.
func runBenchPhase(b *testing.B, name string, phase int, handler http.Handler, n int, publish func(i int, t0 time.Time)) phaseResult {
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
	before, rssBefore := liveBytes(), residentBytes()
	gBefore := runtime.NumGoroutine()

	args := []string{os.Args[0], "-test.run=^TestBenchSSEClient$", "-test.count=1", "-test.v"}
	if watcherCPUs != "" {
		args = append([]string{"taskset", "-c", watcherCPUs}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "BENCH_SSE_URL=http://"+l.Addr().String()+StreamPath,
		"BENCH_SSE_WATCHERS="+strconv.Itoa(n), "BENCH_SSE_DELTAS="+strconv.Itoa(benchDeltas), "BENCH_SSE_PHASE="+strconv.Itoa(phase))
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
	if failed := next("BENCH ready"); failed != "" {
		b.Fatalf("%s: %s: its figures would be of fewer watchers than the other phases'", name, strings.TrimSpace(failed))
	}
	after, rssAfter := liveBytes(), residentBytes()
	gAfter := runtime.NumGoroutine()

	for i := range benchDeltas {
		publish(i, time.Now())
		time.Sleep(deltaInterval(n))
	}
	_ = stdin.Close() // the watchers report once they have every delta, or now
	var r phaseResult
	if err := json.Unmarshal([]byte(next("BENCH result ")), &r); err != nil {
		b.Fatal(err)
	}
	r.BytesPerWatcher = (float64(after) - float64(before)) / float64(n)
	r.RSSPerWatcher = (float64(rssAfter) - float64(rssBefore)) / float64(n)
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

// durations collects latencies from many goroutines.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *durations) add(v time.Duration) { d.mu.Lock(); d.d = append(d.d, v); d.mu.Unlock() }

func (d *durations) percentiles() (p50, p99 time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d.d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}

// baselineServer is the smallest SSE server doing the same job: a goroutine and a buffered
// channel per watcher, each delta encoded once and written as is.
type baselineServer struct {
	mu         sync.Mutex
	snapshot   []byte
	subs       map[chan baselineMsg]struct{}
	dispatched durations
}

type baselineMsg struct {
	b  []byte
	t0 time.Time
}

func newBaselineServer(items []health.Item) *baselineServer {
	data, _ := json.Marshal(health.Event{Type: health.Snapshot, GeneratedAt: time.Now(), Items: items})
	return &baselineServer{snapshot: []byte("event: snapshot\ndata: " + string(data) + "\n\n"), subs: map[chan baselineMsg]struct{}{}}
}

func (s *baselineServer) publish(items []health.Item, t0 time.Time) {
	data, _ := json.Marshal(health.Event{Type: health.Delta, GeneratedAt: time.Now(), Items: items[len(items)-1:]})
	msg := baselineMsg{b: []byte("event: delta\ndata: " + string(data) + "\n\n"), t0: t0}
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
	ch := make(chan baselineMsg, 64)
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
			if _, err := w.Write(msg.b); err != nil {
				return
			}
			f.Flush()
			s.dispatched.add(time.Since(msg.t0))
		}
	}
}

// floorServer measures what one small write to every watcher's socket costs on this machine:
// connections taken over after the snapshot, each delta encoded once and written by as many
// goroutines as the hub's fan-out uses. No server can dispatch faster over TCP.
type floorServer struct {
	mu         sync.Mutex
	snapshot   []byte
	conns      []net.Conn
	dispatched durations
}

func (s *floorServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	_, _ = conn.Write(append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"), s.snapshot...))
	s.mu.Lock()
	s.conns = append(s.conns, conn)
	s.mu.Unlock()
}

func (s *floorServer) publish(items []health.Item, t0 time.Time) {
	data, _ := json.Marshal(health.Event{Type: health.Delta, GeneratedAt: time.Now(), Items: items[len(items)-1:]})
	msg := []byte("event: delta\ndata: " + string(data) + "\n\n")
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	workers := health.FanoutWorkers() // as many as the hub's fan-out, in the same process
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(conns); i += workers {
				_, _ = conns[i].Write(msg)
				s.dispatched.add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
}

func (s *floorServer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
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
	if err := raiseFileLimit(n + fileSlack); err != nil {
		t.Fatal(err)
	}
	phase, _ := strconv.Atoi(os.Getenv("BENCH_SSE_PHASE"))
	dialers := make([]net.Dialer, sources(n))
	for s := range dialers {
		dialers[s].LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, byte(phase), byte(2+s))} //nolint:gosec // phase is 0, 1 or 2
	}

	var ready, failed, received atomic.Int64
	var firstFailure atomic.Value
	fail := func(i int, err error) {
		failed.Add(1)
		firstFailure.CompareAndSwap(nil, fmt.Sprintf("watcher %d: %v", i, err))
	}
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128) // connect at a steady pace: the accept backlog is finite
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := dialers[i%len(dialers)].Dial("tcp", host)
			if err != nil {
				fail(i, err)
				<-sem
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, host)
			resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
			if resp != nil {
				defer resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				if err == nil {
					err = fmt.Errorf("status %s", resp.Status)
				}
				fail(i, err)
				<-sem
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
	// The publisher is told how many could not connect, and what the first of them met.
	if f := failed.Load(); f > 0 {
		fmt.Printf("BENCH ready %d of %d watchers could not connect (first: %v)\n", f, n, firstFailure.Load())
	} else {
		fmt.Println("BENCH ready")
	}
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
