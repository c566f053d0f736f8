//go:build integration

package gateway

// BenchmarkGatewayReplicas is issue 16's item 3: watch-gateway replicas, each its own process
// (the built binary) with its own collector on the test's API server, serving watchers spread
// over them by the client, as a Service would spread them. Two phases in one run:
//
//   - baseline: one replica, watchers/3 watchers;
//   - replicas: three replicas, all the watchers (30,000 by default), then one replica killed:
//     its watchers reconnect to the others with their Last-Event-ID.
//
// A delta is made through the API server: the gateway's own Deployment (part-of agentplane, no
// pods: envtest runs no controllers) gets spec.replicas N, so every replica's collector reports
// "0/N replicas ready"; N is unique per change, so each watcher's arrival is matched with the
// time of the write that caused it: end to end, API write, watch, the collector's 500 ms
// debounce, fan-out, socket. Reported: p50/p99/max, the ratio replicas/baseline, memory per
// watcher from each replica's resident set, and for the
// reconnect: how many watchers lost their replica, how many came back with a snapshot (the
// design: a cursor from another replica's hub is never resumed), how many resumed with deltas
// (must be none) or failed (must be none), and how long until all were back.
//
//	go test -tags integration -run '^$' -bench GatewayReplicas -benchtime 1x ./services/watch-gateway/internal/gateway/
//
// AGENTPLANE_BENCH_REPLICA_WATCHERS changes the number of watchers (default 30000).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/testenv"
)

const replicaDeltas = 10

func replicaWatchers() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTPLANE_BENCH_REPLICA_WATCHERS")); err == nil && n >= 3 {
		return n
	}
	return 30000
}

// replicaResult is what the watcher processes measured, together.
type replicaResult struct {
	// End to end, the API write to the watcher's read, over every watcher and delta.
	P50, P99, Max  time.Duration
	Received, Want int
	// The reconnect after a replica was killed.
	Lost, Snapshots, Resumed, Failed int
	Reconnect                        time.Duration
	// Which changes (spec.replicas N) how many watchers never got as a delta, and how many
	// streams ended before the kill (closed by a gateway, not by the crash).
	MissingByChange map[int]int
	LostBeforeKill  int
}

func BenchmarkGatewayReplicas(b *testing.B) {
	n := replicaWatchers()
	bin, err := testenv.BuildService(b.TempDir(), "watch-gateway")
	if err != nil {
		b.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(env.Config)
	for i := 0; i < b.N; i++ {
		base := runReplicaPhase(b, kc, bin, 1, n/3, false)
		full := runReplicaPhase(b, kc, bin, 3, n, true)

		b.ReportMetric(float64(full.res.P99.Microseconds())/1000, "e2e-p99-ms")
		b.ReportMetric(ratio(full.res.P99, base.res.P99), "e2e-p99/baseline")
		b.ReportMetric(full.kibPerWatcher/base.kibPerWatcher, "mem/baseline")
		b.ReportMetric(full.kibPerWatcher, "KiB/watcher")
		b.ReportMetric(full.res.Reconnect.Seconds(), "reconnect-s")
		testenv.Goal(b, "no-delta-lost", full.res.Received == full.res.Want && base.res.Received == base.res.Want)
		testenv.Goal(b, "e2e-p99/baseline<=1.5", ratio(full.res.P99, base.res.P99) <= 1.5)
		fmt.Printf("watch-gateway replicas: %d watchers over 3 replicas (baseline: %d on 1), %d deltas each, spread by the client; debounce 500ms (the default)\n",
			n, n/3, replicaDeltas)
		fmt.Printf("%-9s %9s %10s %10s %10s %15s %12s %18s\n", "phase", "watchers", "e2e p50", "e2e p99", "e2e max", "received", "KiB/watcher", "RSS MiB (each)")
		for _, p := range []replicaPhase{base, full} {
			fmt.Printf("%-9s %9d %10s %10s %10s %8d/%-6d %12.1f %18s\n", p.name, p.watchers, p.res.P50.Round(time.Millisecond), p.res.P99.Round(time.Millisecond),
				p.res.Max.Round(time.Millisecond), p.res.Received, p.res.Want, p.kibPerWatcher, p.rss)
		}
		fmt.Printf("ratios replicas/baseline: e2e p50 %.2f, e2e p99 %.2f, memory per watcher %.2f\n",
			ratio(full.res.P50, base.res.P50), ratio(full.res.P99, base.res.P99), full.kibPerWatcher/base.kibPerWatcher)
		fmt.Printf("one replica killed: %d watchers lost it; %d came back on the others with a snapshot, %d resumed with deltas, %d failed; all back %s after the kill\n",
			full.res.Lost, full.res.Snapshots, full.res.Resumed, full.res.Failed, full.res.Reconnect.Round(10*time.Millisecond))
		if full.res.Lost == 0 || full.res.Snapshots != full.res.Lost || full.res.Resumed != 0 || full.res.Failed != 0 {
			b.Errorf("reconnect: %d lost, %d snapshots, %d resumed, %d failed: want every lost watcher back with a snapshot",
				full.res.Lost, full.res.Snapshots, full.res.Resumed, full.res.Failed)
		}
		if full.res.Received != full.res.Want || base.res.Received != base.res.Want {
			b.Errorf("deltas lost: replicas %d/%d (missing per change N: %v; streams a gateway ended before the kill: %d), baseline %d/%d (missing: %v; streams ended: %d)",
				full.res.Received, full.res.Want, full.res.MissingByChange, full.res.LostBeforeKill,
				base.res.Received, base.res.Want, base.res.MissingByChange, base.res.LostBeforeKill)
		}
	}
}

type replicaPhase struct {
	name          string
	watchers      int
	res           replicaResult
	kibPerWatcher float64
	rss           string
}

// runReplicaPhase starts replicas gateways on a fresh namespace, connects watchers from a child
// process, makes replicaDeltas changes (and, with kill, kills the last replica and makes one
// more) and returns what the watchers measured.
func runReplicaPhase(b *testing.B, kc kubernetes.Interface, bin string, replicas, watchers int, kill bool) replicaPhase {
	b.Helper()
	ctx := context.Background()
	ns, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "replicas-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	one := int32(1)
	labels := map[string]string{"app.kubernetes.io/part-of": "agentplane", "app.kubernetes.io/name": "watch-gateway"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "watch-gateway", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "agentplane/watch-gateway:dev"}}}}},
	}
	if _, err := kc.AppsV1().Deployments(ns.Name).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	logDir := b.TempDir()
	var gws []*testenv.Service
	var urls []string
	for r := range replicas {
		port, err := testenv.FreePort()
		if err != nil {
			b.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		gw, err := testenv.StartService(bin, logDir, "KUBECONFIG="+env.Kubeconfig, "POD_NAMESPACE="+ns.Name, "POD_NAME=watch-gateway-"+strconv.Itoa(r),
			"JANGAR_HTTP_ADDR="+addr, "JANGAR_WATCH_MAX_STREAMS=40000", "JANGAR_REDIS_URL=")
		if err != nil {
			b.Fatal(err)
		}
		defer gw.Stop()
		gws = append(gws, gw)
		urls = append(urls, "http://"+addr+StreamPath)
	}
	rssBefore := make([]float64, replicas)
	for r, gw := range gws {
		rssBefore[r] = scrapeGauge(b, gw.MetricsAddr, "process_resident_memory_bytes")
	}

	// The watchers live in child processes of at most watchersPerProcess each (a process may
	// hold only so many sockets), every one spread over every replica by its global index.
	var kids []*watcherProcess
	for from := 0; from < watchers; from += watchersPerProcess {
		kids = append(kids, startWatchers(b, urls, from, min(watchersPerProcess, watchers-from)))
	}
	defer func() {
		for _, k := range kids {
			k.stop()
		}
	}()
	for _, k := range kids {
		k.next(b, "BENCH ready")
	}
	var rss []string
	var grown float64
	for r, gw := range gws {
		after := scrapeGauge(b, gw.MetricsAddr, "process_resident_memory_bytes")
		grown += after - rssBefore[r]
		rss = append(rss, fmt.Sprintf("%.0f", after/(1<<20)))
	}

	writes := map[int]int64{} // spec.replicas N -> the time of the write that set it
	change := func(replicasN int) {
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicasN)
		t0 := time.Now()
		if _, err := kc.AppsV1().Deployments(ns.Name).Patch(ctx, "watch-gateway", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		writes[replicasN] = t0.UnixNano()
		time.Sleep(time.Second) // past the collectors' 500 ms debounce: one delta per change
	}
	for d := range replicaDeltas {
		change(d + 2)
	}
	if kill {
		// Every watcher has the changes so far (or none came for 5 s) before the crash: a delta
		// the killed replica had not yet written out would be counted lost, though the watcher
		// gets the state in its snapshot from the next replica.
		for _, k := range kids {
			k.next(b, "BENCH settled")
		}
		killed := time.Now().UnixNano()
		gws[len(gws)-1].Kill() // a crash: no graceful close of its streams
		for _, k := range kids {
			// A watcher process reports each wave of reconnects; a report of a loss before the
			// kill (a stream the gateway closed, counted in the result) is not this one.
			for {
				f := strings.Fields(k.next(b, "BENCH reconnected "))
				if len(f) == 2 {
					if at, _ := strconv.ParseInt(f[1], 10, 64); at >= killed {
						break
					}
				}
			}
		}
		change(replicaDeltas + 2)
	}
	var res replicaResult
	var lat []time.Duration
	var firstLoss, lastBack int64
	for _, k := range kids {
		if err := json.NewEncoder(k.stdin).Encode(writes); err != nil {
			b.Fatal(err)
		}
		_ = k.stdin.Close()
	}
	for _, k := range kids {
		var r watcherReport
		if err := json.Unmarshal([]byte(k.next(b, "BENCH result ")), &r); err != nil {
			b.Fatal(err)
		}
		for _, us := range r.LatencyMicros {
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		res.Want += r.Want
		res.Lost += r.Lost
		res.Snapshots += r.Snapshots
		res.Resumed += r.Resumed
		res.Failed += r.Failed
		for nrep, c := range r.MissingByChange {
			if res.MissingByChange == nil {
				res.MissingByChange = map[int]int{}
			}
			res.MissingByChange[nrep] += c
		}
		res.LostBeforeKill += r.LostBeforeKill
		if r.FirstLoss > 0 && (firstLoss == 0 || r.FirstLoss < firstLoss) {
			firstLoss = r.FirstLoss
		}
		lastBack = max(lastBack, r.LastBack)
	}
	res.Received = len(lat)
	res.P50, res.P99, res.Max = pcts(lat)
	if firstLoss > 0 && lastBack > firstLoss {
		res.Reconnect = time.Duration(lastBack - firstLoss)
	}
	name := "baseline"
	if replicas > 1 {
		name = "replicas"
	}
	return replicaPhase{name: name, watchers: watchers, res: res, kibPerWatcher: grown / 1024 / float64(watchers), rss: strings.Join(rss, "+")}
}

// watchersPerProcess keeps each watcher process well under this machine's open-file limit
// (20,000 here; raising it needs CAP_SYS_RESOURCE).
const watchersPerProcess = 10000

// watcherReport is what one watcher process measured: every delta's latency from the API write
// to the read, and its watchers' reconnects (times in Unix nanoseconds).
type watcherReport struct {
	LatencyMicros                    []int64
	Want                             int
	Lost, Snapshots, Resumed, Failed int
	FirstLoss, LastBack              int64
	MissingByChange                  map[int]int
	LostBeforeKill                   int
}

type watcherProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startWatchers(b *testing.B, urls []string, from, n int) *watcherProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchReplicaClient$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "BENCH_REPLICA_URLS="+strings.Join(urls, ","), "BENCH_REPLICA_FROM="+strconv.Itoa(from),
		"BENCH_REPLICA_WATCHERS="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20) // the result line carries every latency
	return &watcherProcess{cmd: cmd, stdin: stdin, lines: sc}
}

func (w *watcherProcess) stop() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() }

// next returns the rest of the process's next line that starts with prefix.
func (w *watcherProcess) next(b *testing.B, prefix string) string {
	b.Helper()
	var other []string
	for w.lines.Scan() {
		if v, ok := strings.CutPrefix(w.lines.Text(), prefix); ok {
			return v
		}
		if len(other) < 20 {
			other = append(other, w.lines.Text())
		}
	}
	b.Fatalf("a watcher process ended before %q; it said:\n%s", prefix, strings.Join(other, "\n"))
	return ""
}

// scrapeGauge reads one unlabelled metric from a service's /metrics.
func scrapeGauge(b *testing.B, addr, name string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("%s has no %s", addr, name)
	return 0
}

var replicasReady = regexp.MustCompile(`"0/([0-9]+) replicas ready"`)

// watcherLog is what one watcher saw: per change N, when it arrived.
type watcherLog struct {
	mu      sync.Mutex
	arrived map[int]time.Time
}

// TestBenchReplicaClient is the watcher process of BenchmarkGatewayReplicas; on its own it skips.
func TestBenchReplicaClient(t *testing.T) {
	list := os.Getenv("BENCH_REPLICA_URLS")
	if list == "" {
		t.Skip("the watcher side of BenchmarkGatewayReplicas")
	}
	urls := strings.Split(list, ",")
	n, _ := strconv.Atoi(os.Getenv("BENCH_REPLICA_WATCHERS"))
	from, _ := strconv.Atoi(os.Getenv("BENCH_REPLICA_FROM"))
	// One socket per watcher (Go has already raised the soft limit to the hard one).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(max(n, 0))+256 {
		t.Fatalf("the open-file limit (%d) is too low for %d watchers in one process: %v", lim.Cur, n, err)
	}

	var ready, lost, snapshots, resumed, failed, received atomic.Int64
	var firstLoss, lastBack, lastLoss, lostBeforeSettled atomic.Int64
	logs := make([]*watcherLog, n)
	sem := make(chan struct{}, 128) // connect at a steady pace: the accept backlog is finite
	for i := range n {
		logs[i] = &watcherLog{arrived: map[int]time.Time{}}
		sem <- struct{}{}
		go func() {
			at := (from + i) % len(urls)
			first, lastID, err := watchOnce(urls[at], "", logs[i], &received, func(string) { ready.Add(1); <-sem })
			if first == "" {
				failed.Add(1)
				<-sem
				t.Errorf("watcher %d: %v", i, err)
				return
			}
			// The stream ended: its replica went away. Reconnect to the next one with the last
			// id seen, as a browser's EventSource behind a Service would.
			lost.Add(1)
			firstLoss.CompareAndSwap(0, time.Now().UnixNano())
			lastLoss.Store(time.Now().UnixNano())
			// The lost watchers spread over the remaining replicas, as a Service spreads new
			// connections (every one on the next replica would double its load at once).
			at = (at + 1 + ((from+i)/len(urls))%max(len(urls)-1, 1)) % len(urls)
			for range len(urls) {
				first, _, _ = watchOnce(urls[at], lastID, logs[i], &received, func(kind string) {
					switch kind {
					case "snapshot":
						snapshots.Add(1)
					case "delta":
						resumed.Add(1)
					default:
						failed.Add(1)
					}
					lastBack.Store(time.Now().UnixNano())
				})
				if first != "" {
					return
				}
				at = (at + 1) % len(urls)
			}
			failed.Add(1) // no replica took it back
		}()
	}
	for ready.Load()+failed.Load() < int64(n) {
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("BENCH ready")

	// Report each wave of reconnects (with the time of its last loss) once every lost watcher
	// is back and nothing moved for two seconds; and "settled" once every watcher has the
	// replicaDeltas changes made before a kill, or no delta arrived for 5 s after the first.
	go func() {
		var prev, reported int64 = -1, 0
		stable := 0
		for {
			time.Sleep(100 * time.Millisecond)
			l, back := lost.Load(), snapshots.Load()+resumed.Load()+failed.Load()
			if l > reported && back >= l && l == prev {
				if stable++; stable >= 20 {
					fmt.Println("BENCH reconnected", l, lastLoss.Load())
					reported = l
				}
			} else {
				stable = 0
			}
			prev = l
		}
	}()
	go func() {
		var prev int64
		quiet := time.Now()
		for {
			time.Sleep(100 * time.Millisecond)
			got := received.Load()
			if got != prev {
				prev, quiet = got, time.Now()
			}
			if got >= int64(n*replicaDeltas) || (got > 0 && time.Since(quiet) > 5*time.Second) {
				lostBeforeSettled.Store(lost.Load())
				fmt.Println("BENCH settled", got)
				return
			}
		}
	}()

	var writes map[int]int64
	if err := json.NewDecoder(os.Stdin).Decode(&writes); err != nil {
		t.Fatal(err)
	}
	want := n * len(writes)
	deadline := time.Now().Add(15 * time.Second)
	for received.Load() < int64(want) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	r := watcherReport{Want: want, Lost: int(lost.Load()), Snapshots: int(snapshots.Load()), Resumed: int(resumed.Load()), Failed: int(failed.Load()),
		FirstLoss: firstLoss.Load(), LastBack: lastBack.Load(), LostBeforeKill: int(lostBeforeSettled.Load())}
	for _, l := range logs {
		l.mu.Lock()
		for nrep, at := range l.arrived {
			if t0, ok := writes[nrep]; ok {
				r.LatencyMicros = append(r.LatencyMicros, at.Sub(time.Unix(0, t0)).Microseconds())
			}
		}
		for nrep := range writes {
			if _, ok := l.arrived[nrep]; !ok {
				if r.MissingByChange == nil {
					r.MissingByChange = map[int]int{}
				}
				r.MissingByChange[nrep]++
			}
		}
		l.mu.Unlock()
	}
	out, _ := json.Marshal(r)
	fmt.Println("BENCH result " + string(out))
}

func pcts(d []time.Duration) (p50, p99, pmax time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100], d[len(d)-1]
}

// watchOnce holds one SSE watch on url (with Last-Event-ID when since is set) until it ends. It
// calls first with the type of the first event (or "status <code>" when refused) and records
// every "0/N replicas ready" delta in log (counting the first arrival of each N in received).
// It returns that first type ("" when it never connected) and the last id seen.
func watchOnce(url, since string, log *watcherLog, received *atomic.Int64, first func(kind string)) (string, string, error) {
	hostPath := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(hostPath, "/")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	req := "GET /" + path + " HTTP/1.1\r\nHost: " + host + "\r\nAccept: text/event-stream\r\n"
	if since != "" {
		req += "Last-Event-ID: " + since + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return "", "", err
	}
	// A replica that cannot take the connection (out of file descriptors, say) must not hold
	// the watcher forever: the response headers come within 30 s or the watcher moves on.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil {
		return "", "", err
	}
	_ = conn.SetReadDeadline(time.Time{})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		kind := "status " + strconv.Itoa(resp.StatusCode)
		first(kind)
		return kind, "", nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var kind, firstKind, lastID string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			lastID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			now := time.Now()
			if firstKind == "" {
				firstKind = kind
				first(kind)
			}
			if kind != "delta" {
				continue
			}
			m := replicasReady.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			nrep, _ := strconv.Atoi(m[1])
			log.mu.Lock()
			if _, seen := log.arrived[nrep]; !seen {
				log.arrived[nrep] = now
				received.Add(1)
			}
			log.mu.Unlock()
		}
	}
	if firstKind == "" {
		return "", lastID, fmt.Errorf("the stream ended before its first event: %v", sc.Err())
	}
	return firstKind, lastID, nil
}
