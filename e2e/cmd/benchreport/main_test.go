package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/agentplane/agentplane/services/status-writer/internal/writer
cpu: Some CPU
BenchmarkStatusWriteCoalescing-2   	      40	  51234567 ns/op	         1.250 direct-api-writes/request	         0.2500 api-writes/request	         0.2000 ratio-vs-direct	         1.000 goal-met/ratio<=0.3
--- BENCH: BenchmarkStatusWriteCoalescing-2
    bench_integration_test.go:160: goal met: ratio<=0.3
BenchmarkStatusWriteCoalescing-2   	      40	  50000000 ns/op	         1.300 direct-api-writes/request	         0.2600 api-writes/request	         0.2000 ratio-vs-direct	         1.000 goal-met/ratio<=0.3
BenchmarkStatusWriteCoalescing-2   	      40	  49000000 ns/op	         1.200 direct-api-writes/request	         0.2400 api-writes/request	         0.2000 ratio-vs-direct	         1.000 goal-met/ratio<=0.3
pkg: github.com/agentplane/agentplane/services/event-emitter/internal/limiter
BenchmarkLimiterDecisions/concurrency-64-2         	       1	1000 ns/op	         0.95 ours/raw	         1 goal-met/ours/raw>=0.8	         0 goal-met/rounds>=0.8
--- BENCH: BenchmarkLimiterDecisions/concurrency-64-2
    bench_integration_test.go:99: GOAL MISSED: rounds>=0.8
BenchmarkLimiterDecisions/concurrency-64-2         	       1	1000 ns/op	         0.97 ours/raw	         1 goal-met/ours/raw>=0.8	         1 goal-met/rounds>=0.8
PASS
`

func TestReportHasEveryFigureItsMedianAndTheGoals(t *testing.T) {
	dir := t.TempDir()
	meta := "run: 20261127T020000Z-abc1234\ndate: 2026-11-27T02:00:00Z\ncommit: abc1234\nhost: ci\ncpus: 2\ncpu: Some CPU\nmemory: 24 GiB\ngo: go1.26.8\npackages: ./services/status-writer/...\n"
	if err := os.WriteFile(filepath.Join(dir, "meta.txt"), []byte(meta), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "integration.txt"), []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := report(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"2026-11-27T02:00:00Z, commit abc1234, ci: 2 CPUs (Some CPU), 24 GiB, go1.26.8.",
		"Benchmarks run: ./services/status-writer/....",
		"### StatusWriteCoalescing",
		"| api-writes/request | 0.25 | 0.25, 0.26, 0.24 |",
		"| direct-api-writes/request | 1.25 | 1.25, 1.3, 1.2 |",
		"| ns/op | 50000000 | 51234567, 50000000, 49000000 |",
		"- goal `ratio<=0.3`: met (in 3 of 3 runs)",
		"### LimiterDecisions/concurrency-64",
		"| ours/raw | 0.96 | 0.95, 0.97 |",
		"- goal `ours/raw>=0.8`: met (in 2 of 2 runs)",
		"- goal `rounds>=0.8`: **MISSED** (met in 1 of 2 runs)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| goal-met/") {
		t.Errorf("a goal's figure is in a table instead of the goals:\n%s", got)
	}
}

func TestReportRefusesARunWithoutItsMachine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "integration.txt"), []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := report(dir); err == nil || !strings.Contains(err.Error(), "meta.txt") {
		t.Fatalf("err = %v, want it to name the missing meta.txt", err)
	}
}

func TestSpliceReplacesOnlyTheGeneratedSection(t *testing.T) {
	doc := []byte("# Benchmarks\n\nintro\n\n" + begin + "\nold\n" + end + "\n\n## hand-written\n")
	got := string(splice(doc, []byte("new\n")))
	want := "# Benchmarks\n\nintro\n\n" + begin + "\nnew\n" + end + "\n\n## hand-written\n"
	if got != want {
		t.Fatalf("splice =\n%s\nwant\n%s", got, want)
	}
	if got := string(splice([]byte("# B\n"), []byte("x\n"))); got != "# B\n\n"+begin+"\nx\n"+end+"\n" {
		t.Fatalf("appended = %q", got)
	}
}

// A benchmark that fails before any benchmark of its package reported is shown under its own
// package, not the one before it (go test prints "pkg:" with a package's first result).
func TestAFailureBeforeItsPackagesFirstResultIsFiledUnderItsPackage(t *testing.T) {
	dir := t.TempDir()
	meta := "run: r\ndate: d\ncommit: c\nhost: h\ncpus: 2\ncpu: x\nmemory: 1 GiB\ngo: go\npackages: p\ncount: 1\n" +
		"tier integration: FAILED (exit 1)\n"
	integration := "pkg: example.com/first\nBenchmarkA-2   1   5 ns/op\nPASS\nok  \texample.com/first\t1.0s\n" +
		"BenchmarkLost-2\n--- FAIL: BenchmarkLost-2\n    x_test.go:1: too few files\n" +
		"pkg: example.com/second\nBenchmarkB-2   1   6 ns/op\nFAIL\nFAIL\texample.com/second\t2.0s\n" +
		"BenchmarkAlone-2\n--- FAIL: BenchmarkAlone-2\nFAIL\nFAIL\texample.com/third\t3.0s\n"
	for name, body := range map[string]string{"meta.txt": meta, "integration.txt": integration} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := report(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"### Lost\n\n`example.com/second`\n\n**FAILED** in 1 of 1 runs",
		"### Alone\n\n`example.com/third`\n\n**FAILED** in 1 of 1 runs",
		"### A\n\n`example.com/first`",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

func TestReportShowsFailedBenchmarksAndJudgesGoalsByMajority(t *testing.T) {
	dir := t.TempDir()
	meta := "run: r\ndate: d\ncommit: c\nhost: h\ncpus: 2\ncpu: x\nmemory: 1 GiB\ngo: go\npackages: p\ncount: 3\n" +
		"tier integration: passed\ntier e2e: FAILED (exit 1)\n"
	e2e := `pkg: github.com/agentplane/agentplane/e2e
BenchmarkMostly-2   1   5 ns/op   1 goal-met/a   0 goal-met/b
BenchmarkMostly-2   1   6 ns/op   1 goal-met/a   1 goal-met/b
BenchmarkMostly-2   1   7 ns/op   0 goal-met/a   0 goal-met/b
BenchmarkFlaky-2   1   9 ns/op   1 goal-met/c
BenchmarkFlaky-2   1   8 ns/op   1 goal-met/c
BenchmarkFlaky-2
--- FAIL: BenchmarkFlaky-2
    bench_test.go:10: the stack did not start
BenchmarkBroken-2
--- FAIL: BenchmarkBroken-2
BenchmarkBroken-2
--- FAIL: BenchmarkBroken-2
BenchmarkBroken-2
--- FAIL: BenchmarkBroken-2
BenchmarkTwice-2   1   3 ns/op   1 goal-met/d
BenchmarkTwice-2   1   4 ns/op   1 goal-met/d
BenchmarkTwice-2
--- FAIL: BenchmarkTwice
    bench_test.go:20: deltas lost
--- FAIL: BenchmarkTwice-2
    bench_test.go:20: deltas lost
--- FAIL: BenchmarkOnce
    bench_test.go:30: 17000 watchers, not 100,000
FAIL
`
	for name, body := range map[string]string{"meta.txt": meta, "e2e.txt": e2e} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := report(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"Each benchmark ran 3 times",
		"Tiers: e2e **FAILED** (exit 1); integration passed.",
		"- goal `a`: met (in 2 of 3 runs)",
		"- goal `b`: **MISSED** (met in 1 of 3 runs)",
		"### Flaky",
		"**FAILED** in 1 of 3 runs",
		"- goal `c`: met (in 2 of 3 runs)",
		"### Broken",
		"**FAILED** in 3 of 3 runs",
		"### Once\n\n`github.com/agentplane/agentplane/e2e`\n\n**FAILED** in 1 of the 1 run(s) it had, of 3 asked (Go does not run a benchmark again once its first run failed",
		// One failed run that go test names twice (without and with -2) counts once.
		"### Twice\n\n`github.com/agentplane/agentplane/e2e`\n\n**FAILED** in 1 of 3 runs (the tier",
		"- goal `d`: met (in 2 of 3 runs)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
}

func TestMissedListsEveryBenchmarkWithAGoalMissedOrAFailedRun(t *testing.T) {
	in := `pkg: example.com/a
BenchmarkMet-2   1   5 ns/op   1 goal-met/a   1 goal-met/b
BenchmarkMet-2   1   5 ns/op   0 goal-met/a   1 goal-met/b
BenchmarkMet-2   1   5 ns/op   1 goal-met/a   1 goal-met/b
BenchmarkHalf-2   1   5 ns/op   1 goal-met/c   0 goal-met/d
BenchmarkHalf-2   1   5 ns/op   0 goal-met/c   0 goal-met/d
BenchmarkHalf-2   1   5 ns/op   1 goal-met/c   1 goal-met/d
ok  	example.com/a	1.0s
pkg: example.com/b
BenchmarkSub/concurrency-64-2   1   5 ns/op   1 goal-met/e
BenchmarkSub/concurrency-64-2   1   5 ns/op   1 goal-met/e
BenchmarkSub/concurrency-64-2
--- FAIL: BenchmarkSub/concurrency-64-2
BenchmarkNoGoals-2   1   5 ns/op
--- FAIL: BenchmarkOnce
    bench_test.go:30: 17000 watchers, not 100,000
FAIL	example.com/b	2.0s
`
	results, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := missedGoals(results)
	want := []string{
		"example.com/a\tBenchmarkHalf\td",
		"example.com/b\tBenchmarkSub/concurrency-64\tFAILED",
		"example.com/b\tBenchmarkOnce\tFAILED",
	}
	if !slices.Equal(got, want) {
		t.Errorf("missed goals:\n got %q\nwant %q", got, want)
	}
}
