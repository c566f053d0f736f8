//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchRefusesADirtyTree: `make bench` measures HEAD, so hack/bench.sh refuses a tree with
// changes (an untracked file is enough) before it writes anything, and a clean tree gets past
// that check.
func TestBenchRefusesADirtyTree(t *testing.T) {
	clone, bench := scriptInClone(t, "bench.sh", "PKGS=./nothing/...", "BENCH_E2E=0")
	refusesADirtyTree(t, clone, "bench.sh", bench, "measures HEAD")
	out, err := bench()
	if strings.Contains(out, "measures HEAD") || !strings.Contains(out, "fake-go") {
		t.Fatalf("bench.sh on a clean tree: %v, want it past the check and running go:\n%s", err, out)
	}
	// The failed tier is recorded, its output kept, and the script exits non-zero.
	runs, _ := filepath.Glob(filepath.Join(clone, ".bench", "*", "meta.txt"))
	if len(runs) != 1 {
		t.Fatalf("runs written: %v", runs)
	}
	meta, _ := os.ReadFile(runs[0])
	if err == nil || !strings.Contains(string(meta), "tier integration: FAILED (exit 3)") {
		t.Fatalf("a failing tier: exit %v, meta.txt:\n%s\noutput:\n%s", err, meta, out)
	}
	if log, _ := os.ReadFile(filepath.Join(filepath.Dir(runs[0]), "integration.log")); !strings.Contains(string(log), "fake-go test -p 1") {
		t.Fatalf("the failed tier's output was not kept: %q", log)
	}
}

// TestBenchProfileRefusesADirtyTree: `make bench-profile` profiles HEAD, so
// hack/bench-profile.sh refuses a tree with changes (an untracked file is enough) before it
// writes anything, and a clean tree gets past that check to ask benchreport what missed a goal.
func TestBenchProfileRefusesADirtyTree(t *testing.T) {
	clone, profile := scriptInClone(t, "bench-profile.sh")
	refusesADirtyTree(t, clone, "bench-profile.sh", profile, "profiles HEAD")
	out, err := profile()
	if err == nil || strings.Contains(out, "profiles HEAD") || !strings.Contains(out, "fake-go run ./cmd/benchreport") || !strings.Contains(out, "-missed") {
		t.Fatalf("bench-profile.sh on a clean tree: %v, want it past the check asking benchreport -missed (and failing with the fake go):\n%s", err, out)
	}
}

// TestBenchResultsJoinFiguresALogLineSplitFromTheirName: Go prints a benchmark's name before it
// runs and its figures after, so a line the benchmark logs meanwhile (job-gc's INFO lines do)
// separates them. hack/bench-results.sh joins the figures back to their name: without that, the
// run's result is not in <tier>.txt and the report counts one run fewer.
func TestBenchResultsJoinFiguresALogLineSplitFromTheirName(t *testing.T) {
	log := strings.Join([]string{
		"goos: linux",
		"pkg: example.com/gc",
		"BenchmarkGC-2   \t       1\t        48.11 direct-s\t         0.99 gc-vs-direct",
		"--- BENCH: BenchmarkGC-2",
		"    bench_test.go:159: goal met: gc-vs-direct>=0.8",
		"BenchmarkGC-2   \t2026/12/02 05:23:57 INFO caches synced; guarding Job results",
		"2026/12/02 05:23:57 INFO released job-result hold job=bench-6/j-1718",
		"       1\t        48.12 direct-s\t         0.98 gc-vs-direct",
		"--- BENCH: BenchmarkGC-2",
		"    bench_test.go:160: GOAL MISSED: gc-vs-direct>=0.99",
		"PASS",
		"ok  \texample.com/gc\t544.7s",
	}, "\n") + "\n"
	cmd := exec.CommandContext(context.Background(), "bash", filepath.Join(repoRoot(t), "hack", "bench-results.sh"))
	cmd.Stdin = strings.NewReader(log)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "BenchmarkGC-2") {
			results = append(results, l)
		}
		if strings.Contains(l, "INFO") {
			t.Errorf("a log line was kept: %q", l)
		}
	}
	if len(results) != 2 || !strings.Contains(results[1], "48.12 direct-s") || !strings.HasPrefix(results[1], "BenchmarkGC-2\t1\t") {
		t.Fatalf("results %q, want both runs, the second joined to its name:\n%s", results, out)
	}
	for _, want := range []string{"goos: linux", "pkg: example.com/gc", "goal met: gc-vs-direct>=0.8", "GOAL MISSED: gc-vs-direct>=0.99", "PASS", "ok  \texample.com/gc"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// refusesADirtyTree runs script (run) in clone with an untracked file there and fails t unless
// the script refuses, saying want and naming the file, before go runs or .bench/ is written; it
// then removes the file, leaving the clone clean.
func refusesADirtyTree(t *testing.T, clone, script string, run func() (string, error), want string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(clone, "notes.txt"), []byte("uncommitted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run()
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "notes.txt") || strings.Contains(out, "fake-go") {
		t.Fatalf("%s on a tree with an untracked file: %v, want a refusal naming it before go runs:\n%s", script, err, out)
	}
	if _, err := os.Stat(filepath.Join(clone, ".bench")); !os.IsNotExist(err) {
		t.Fatalf("the refused run wrote .bench/ (%v)", err)
	}
	if err := os.Remove(filepath.Join(clone, "notes.txt")); err != nil {
		t.Fatal(err)
	}
}

// scriptInClone clones the repository with the working tree's hack/<script> committed over
// HEAD's (the one under test), and returns the clone and a runner of the script there, with env
// added and a go that is not Go first on PATH: it names itself and its arguments on stderr and
// exits 3, so a run that gets past the script's own checks shows that it reached go.
func scriptInClone(t *testing.T, script string, env ...string) (string, func() (string, error)) {
	t.Helper()
	root := repoRoot(t)
	clone := filepath.Join(t.TempDir(), "repo")
	git := func(dir string, args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(context.Background(), "git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(root, "clone", "-q", "--no-hardlinks", root, clone)
	body, err := os.ReadFile(filepath.Join(root, "hack", script))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clone, "hack", script), body, 0o755); err != nil { //nolint:gosec // G306: a script
		t.Fatal(err)
	}
	git(clone, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", script+" under test", "--allow-empty")
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\necho fake-go \"$@\" >&2\nexit 3\n"), 0o755); err != nil { //nolint:gosec // G306: a stub
		t.Fatal(err)
	}
	return clone, func() (string, error) {
		cmd := exec.CommandContext(context.Background(), "bash", filepath.Join(clone, "hack", script))
		cmd.Env = append(append(os.Environ(), env...), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// TestBenchReportReadsTheNewestBenchRunNotAProfileDirectory: `make bench-report` copies the
// newest `make bench` run (.bench/<time>Z-<commit>/) to docs/bench-results/; the profiles that
// `make bench-profile` and bench-scale's AGENTPLANE_BENCH_PROFILES write under .bench/ sort
// after every run and are never taken for one.
func TestBenchReportReadsTheNewestBenchRunNotAProfileDirectory(t *testing.T) {
	clone, _ := scriptInClone(t, "bench.sh")
	write := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil { //nolint:gosec // G306: test data
			t.Fatal(err)
		}
	}
	write(filepath.Join(clone, ".bench", "20261201T000000Z-aaaaaaa", "integration.txt"), "the older run\n")
	write(filepath.Join(clone, ".bench", "20261207T084834Z-bbbbbbb", "integration.txt"), "the newest run\n")
	write(filepath.Join(clone, ".bench", "profiles-scale-ccccccc", "t1000-top.txt"), "a profile\n")
	bin := t.TempDir()
	// A go that does nothing: benchreport's generation is not what this test checks.
	write(filepath.Join(bin, "go"), "#!/bin/sh\nexit 0\n")
	if err := os.Chmod(filepath.Join(bin, "go"), 0o755); err != nil { //nolint:gosec // G302: a stub
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "make", "-C", clone, "bench-report")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make bench-report: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(clone, "docs", "bench-results", "integration.txt"))
	if string(got) != "the newest run\n" {
		t.Errorf("docs/bench-results/integration.txt says %q (%v), want the newest run's\n%s", got, err, out)
	}
	if _, err := os.Stat(filepath.Join(clone, "docs", "bench-results", "t1000-top.txt")); err == nil {
		t.Errorf("a profile directory's file was copied as a run's result\n%s", out)
	}
}
