//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux ABI Go supports here).
const userHZ = 100

// cpuSample is the CPU time (user + system, seconds) each process of a local stack has used so
// far (by its run/<name>.pid file; "bench" is this test process), and the machine's busy and
// total time from /proc/stat (every core's).
type cpuSample struct {
	proc        map[string]float64
	busy, total float64
}

// sampleCPU reads the CPU times of the stack whose state folder is dir.
func sampleCPU(tb testing.TB, dir string) cpuSample {
	tb.Helper()
	s := cpuSample{proc: map[string]float64{}}
	pids, _ := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	for _, f := range pids {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, ok := procCPU(strings.TrimSpace(string(raw))); ok {
			s.proc[strings.TrimSuffix(filepath.Base(f), ".pid")] = v
		}
	}
	if v, ok := procCPU("self"); ok {
		s.proc["bench"] = v
	}
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		tb.Fatalf("read /proc/stat: %v", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	// cpu user nice system idle iowait irq softirq steal ...
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		s.total += v / userHZ
		if i != 3 && i != 4 { // idle, iowait
			s.busy += v / userHZ
		}
	}
	return s
}

// procCPU is a process's user + system CPU seconds from /proc/PID/stat.
func procCPU(pid string) (float64, bool) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces; the fields after its ")" start at state (3).
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (utime + stime) / userHZ, true
}

// reportCPU reports, per unit of work (n of them between before and after), the CPU
// milliseconds each process used ("<prefix><name>_cpu_ms/run", only those that used any), all of
// them together ("<prefix>all_cpu_ms/run", this test process included) and how busy the machine
// was ("<prefix>machine_busy", 1 = every core busy throughout). It returns the per-process
// figures for a log line.
func reportCPU(b *testing.B, prefix string, before, after cpuSample, n int) string {
	names := make([]string, 0, len(after.proc))
	for name := range after.proc {
		names = append(names, name)
	}
	slices.Sort(names)
	var all float64
	var parts []string
	for _, name := range names {
		d := after.proc[name] - before.proc[name]
		if d <= 0 {
			continue
		}
		all += d
		ms := 1000 * d / float64(n)
		b.ReportMetric(ms, prefix+name+"_cpu_ms/run")
		parts = append(parts, fmt.Sprintf("%s %.1f", name, ms))
	}
	b.ReportMetric(1000*all/float64(n), prefix+"all_cpu_ms/run")
	if dt := after.total - before.total; dt > 0 {
		b.ReportMetric((after.busy-before.busy)/dt, prefix+"machine_busy")
	}
	return fmt.Sprintf("all %.1f (%s)", 1000*all/float64(n), strings.Join(parts, ", "))
}

// profiler takes CPU profiles of services (their /debug/pprof/profile, served with
// JANGAR_DEBUG_PPROF=true) and of kube-apiserver (its own /debug/pprof, through kc) back to
// back in windows of 10 s from start until stop, and each process's allocation profile
// (/debug/pprof/allocs) at start and at stop; then it writes into dir each one's merged CPU
// profile with its top frames (go tool pprof -top), and the top frames of what it allocated
// between start and stop (the stop profile less the start one, by bytes allocated).
type profiler struct {
	dir     string
	stopped chan struct{}
	wg      sync.WaitGroup
	// get fetches one named profile of a process (its path under /debug/pprof/, query included).
	get map[string]func(ctx context.Context, path string) ([]byte, error)
}

// profileWindow is how long each CPU profile of a window lasts; the last may outlast stop by up
// to this much.
const profileWindow = 10 * time.Second

// metricsAddrs maps each named service to its metrics address (where Go's profiles are served
// with JANGAR_DEBUG_PPROF=true) on a local stack started with port offset offset.
func metricsAddrs(offset int, names ...string) map[string]string {
	m := map[string]string{}
	for _, name := range names {
		m[name] = fmt.Sprintf("127.0.0.1:%d", servicePorts[name][1]+offset)
	}
	return m
}

func startProfiles(tb testing.TB, dir string, services map[string]string, kc kubernetes.Interface) *profiler {
	tb.Helper()
	p := &profiler{dir: dir, stopped: make(chan struct{}), get: map[string]func(context.Context, string) ([]byte, error){}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for name, metricsAddr := range services {
		p.get[name] = func(ctx context.Context, path string) ([]byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/debug/pprof/"+path, nil)
			if err != nil {
				return nil, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s (is JANGAR_DEBUG_PPROF=true set?)", resp.Status)
			}
			return raw, err
		}
	}
	if kc != nil {
		p.get["kube-apiserver"] = func(ctx context.Context, path string) ([]byte, error) {
			name, query, _ := strings.Cut(path, "?")
			r := kc.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/" + name)
			if secs, ok := strings.CutPrefix(query, "seconds="); ok {
				r = r.Param("seconds", secs)
			}
			return r.DoRaw(ctx)
		}
	}
	p.allocs(tb, "start")
	secs := strconv.Itoa(int(profileWindow / time.Second))
	for name, get := range p.get {
		p.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-p.stopped:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), profileWindow+30*time.Second)
				raw, err := get(ctx, "profile?seconds="+secs)
				cancel()
				if err != nil {
					tb.Logf("profile of %s (window %d): %v", name, i, err)
					return
				}
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%03d.pb.gz", name, i)), raw, 0o644)
			}
		})
	}
	return p
}

// allocs writes each process's allocation profile so far (every allocation since it started,
// sampled) to <name>-allocs-<at>.pb.gz.
func (p *profiler) allocs(tb testing.TB, at string) {
	tb.Helper()
	for name, get := range p.get {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		raw, err := get(ctx, "allocs")
		cancel()
		if err != nil {
			tb.Logf("allocation profile of %s (%s): %v", name, at, err)
			continue
		}
		_ = os.WriteFile(filepath.Join(p.dir, fmt.Sprintf("%s-allocs-%s.pb.gz", name, at)), raw, 0o644)
	}
}

// stop waits for the windows in flight and writes, for each process, its merged profile
// (<name>.pb.gz) and top frames by flat and by cumulative time (<name>-top.txt), and the top
// frames of what it allocated in between (<name>-alloc-top.txt), and returns the CPU tops for
// the log.
func (p *profiler) stop(tb testing.TB, top int) string {
	tb.Helper()
	p.allocs(tb, "end")
	close(p.stopped)
	p.wg.Wait()
	p.allocTops(tb, top)
	windows, _ := filepath.Glob(filepath.Join(p.dir, "*-[0-9][0-9][0-9].pb.gz"))
	byName := map[string][]string{}
	for _, w := range windows {
		base := filepath.Base(w)
		name := base[:len(base)-len("-000.pb.gz")]
		byName[name] = append(byName[name], w)
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	var summary strings.Builder
	for _, name := range names {
		merged := filepath.Join(p.dir, name+".pb.gz")
		args := append([]string{"tool", "pprof", "-proto", "-output", merged}, byName[name]...)
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			tb.Logf("merge the profiles of %s: %v\n%s", name, err, out)
			continue
		}
		var text strings.Builder
		for _, order := range []string{"-flat", "-cum"} {
			out, err := exec.Command("go", "tool", "pprof", "-top", order, "-nodecount", strconv.Itoa(top), merged).CombinedOutput()
			if err != nil {
				tb.Logf("top of %s: %v\n%s", name, err, out)
				continue
			}
			fmt.Fprintf(&text, "# go tool pprof -top %s -nodecount %d %s\n%s\n", order, top, filepath.Base(merged), out)
		}
		_ = os.WriteFile(filepath.Join(p.dir, name+"-top.txt"), []byte(text.String()), 0o644)
		fmt.Fprintf(&summary, "\n== %s\n%s", name, text.String())
		for _, w := range byName[name] {
			_ = os.Remove(w)
		}
	}
	return summary.String()
}

// allocTops writes, for each process with an allocation profile at start and at end, the top
// frames by bytes allocated between the two (flat and cumulative) to <name>-alloc-top.txt.
func (p *profiler) allocTops(tb testing.TB, top int) {
	tb.Helper()
	for name := range p.get {
		start := filepath.Join(p.dir, name+"-allocs-start.pb.gz")
		end := filepath.Join(p.dir, name+"-allocs-end.pb.gz")
		if _, err := os.Stat(start); err != nil {
			continue
		}
		if _, err := os.Stat(end); err != nil {
			continue
		}
		var text strings.Builder
		for _, order := range []string{"-flat", "-cum"} {
			args := []string{"tool", "pprof", "-top", order, "-sample_index=alloc_space", "-nodecount", strconv.Itoa(top), "-base", start, end}
			out, err := exec.Command("go", args...).CombinedOutput()
			if err != nil {
				tb.Logf("allocation top of %s: %v\n%s", name, err, out)
				continue
			}
			fmt.Fprintf(&text, "# go tool pprof -top %s -sample_index=alloc_space -nodecount %d -base %s %s\n%s\n",
				order, top, filepath.Base(start), filepath.Base(end), out)
		}
		_ = os.WriteFile(filepath.Join(p.dir, name+"-alloc-top.txt"), []byte(text.String()), 0o644)
	}
}
