// Command benchreport turns the result files of one `make bench` run into the generated section
// of docs/benchmarks.md: the machine, date and commit the run recorded (meta.txt), then for each
// benchmark every figure it reported, with the median of its runs and each run, and its goals
// (figures named goal-met/<goal>, 1 when met), each met when met in more than half of the runs,
// with how many runs met it. A benchmark that failed in a run ("--- FAIL") shows as FAILED there,
// and meta.txt's "tier <name>:" lines (how each go test ended) are repeated. The text between "<!-- bench-report:begin -->" and
// "<!-- bench-report:end -->" in the document is replaced; a document without the markers gets
// them appended. `make bench-report` copies the newest run in .bench/ to docs/bench-results/ and
// runs it there, so that the committed figures come with the files they were generated from.
//
//	go run ./cmd/benchreport -run DIR -doc FILE
//	go run ./cmd/benchreport -run DIR -missed
//
// With -missed it writes no document and prints, tab-separated, the package, name and missed
// goals of each benchmark that missed a goal or failed (`make bench-profile` profiles those).
//
// DIR holds meta.txt ("key: value" lines) and *.txt files in Go's benchmark format (what
// `go test -bench` prints, benchstat's input).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

const (
	begin = "<!-- bench-report:begin -->"
	end   = "<!-- bench-report:end -->"
	// goalPrefix marks a figure that says whether a goal was met (1) or missed (0) in a run.
	goalPrefix = "goal-met/"
)

func main() {
	run := flag.String("run", "", "the directory of one `make bench` run")
	doc := flag.String("doc", "docs/benchmarks.md", "the document whose generated section to replace")
	missed := flag.Bool("missed", false, "write no document: print each benchmark of the run that missed a goal or failed, one per line (package, name, the goals missed or FAILED; tab-separated)")
	flag.Parse()
	if *run == "" {
		fmt.Fprintln(os.Stderr, "benchreport: -run DIR is required (a directory `make bench` wrote under .bench/)")
		os.Exit(2)
	}
	if *missed {
		results, err := readResults(*run)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		for _, line := range missedGoals(results) {
			fmt.Println(line)
		}
		return
	}
	section, err := report(*run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	old, err := os.ReadFile(*doc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*doc, splice(old, section), 0o644); err != nil { //nolint:gosec // G306: a document in the repository
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

// splice replaces the text between the markers with section, or appends both.
func splice(doc, section []byte) []byte {
	block := append(append([]byte(begin+"\n"), section...), []byte(end)...)
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return append(append(bytes.TrimRight(doc, "\n"), "\n\n"...), append(block, '\n')...)
	}
	return slices.Concat(doc[:i], block, doc[j+len(end):])
}

// result is one benchmark's figures over its runs, by unit.
type result struct {
	name     string
	pkg      string
	units    []string             // in the order first reported
	runs     map[string][]float64 // unit -> one value per run
	reported int                  // runs that printed a result line
	failed   int                  // runs that ended in "--- FAIL: <name>"
}

// report reads a run directory and renders the section.
func report(dir string) ([]byte, error) {
	meta, err := readMeta(filepath.Join(dir, "meta.txt"))
	if err != nil {
		return nil, err
	}
	results, err := readResults(dir)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	count := writeHeader(&b, meta)
	for _, r := range results {
		writeResult(&b, r, count)
	}
	return b.Bytes(), nil
}

// readResults parses every result file of the run directory.
func readResults(dir string) ([]*result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	var results []*result
	for _, f := range files {
		if filepath.Base(f) == "meta.txt" {
			continue
		}
		fh, err := os.Open(f) //nolint:gosec // G304: the run directory the caller named
		if err != nil {
			return nil, err
		}
		rs, err := parse(fh)
		_ = fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		results = append(results, rs...)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("no benchmark results in %s (is it a `make bench` run directory?)", dir)
	}
	return results, nil
}

// writeHeader writes what the run was (machine, commit, runs per benchmark, tiers); it returns
// the runs per benchmark (0 if meta.txt does not say).
func writeHeader(b *bytes.Buffer, meta map[string]string) int {
	fmt.Fprintf(b, "## The latest `make bench` run (generated by `make bench-report`; do not edit)\n\n")
	fmt.Fprintf(b, "%s, commit %s, %s: %s CPUs (%s), %s, %s.\n", meta["date"], meta["commit"], meta["host"],
		meta["cpus"], meta["cpu"], meta["memory"], meta["go"])
	fmt.Fprintf(b, "Benchmarks run: %s.\n", meta["packages"])
	fmt.Fprintf(b, "Result files: `docs/bench-results/` (`<tier>.txt` in Go's benchmark format, which `benchstat` reads; `<tier>.log`, each tier's output less its INFO lines), copied from the run `.bench/%s/`.\n", meta["run"])
	count, _ := strconv.Atoi(meta["count"])
	if count > 0 {
		fmt.Fprintf(b, "Each benchmark ran %d times; a figure is the median of its runs, and a goal is met when it was met in more than half of them.\n", count)
	}
	var tiers []string
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if name, ok := strings.CutPrefix(k, "tier "); ok {
			status := meta[k]
			if strings.HasPrefix(status, "FAILED") {
				status = "**" + status[:len("FAILED")] + "**" + status[len("FAILED"):]
			}
			tiers = append(tiers, fmt.Sprintf("%s %s", name, status))
		}
	}
	if len(tiers) > 0 {
		fmt.Fprintf(b, "Tiers: %s.\n", strings.Join(tiers, "; "))
	}
	return count
}

// writeResult writes one benchmark: failed runs, each figure's median and runs, each goal judged
// by majority (a failed run met no goal).
func writeResult(b *bytes.Buffer, r *result, count int) {
	fmt.Fprintf(b, "\n### %s\n\n`%s`\n\n", strings.TrimPrefix(r.name, "Benchmark"), r.pkg)
	switch ran := r.reported + r.failed; {
	case r.failed > 0 && ran < count:
		// Go runs a benchmark again (-count) only when its first run passed; a tier cut short
		// (its timeout) runs fewer too.
		fmt.Fprintf(b, "**FAILED** in %d of the %d run(s) it had, of %d asked (Go does not run a benchmark again once its first run failed; the tier's log, beside its results, says why).\n\n", r.failed, ran, count)
	case r.failed > 0:
		fmt.Fprintf(b, "**FAILED** in %d of %d runs (the tier's log, beside its results, says why).\n\n", r.failed, ran)
	}
	if len(r.units) == 0 {
		return
	}
	fmt.Fprintf(b, "| figure | median | runs |\n|---|---|---|\n")
	var goals []string
	for _, u := range r.units {
		vs := r.runs[u]
		if g, ok := strings.CutPrefix(u, goalPrefix); ok {
			goals = append(goals, goalLine(g, vs, r.failed))
			continue
		}
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = num(v)
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", u, num(median(vs)), strings.Join(parts, ", "))
	}
	if len(goals) > 0 {
		fmt.Fprintf(b, "\n%s\n", strings.Join(goals, "\n"))
	}
}

// goalLine judges a goal from its runs (1 met, 0 missed) and the runs that failed.
func goalLine(goal string, vs []float64, failed int) string {
	met, n, ok := judge(vs, failed)
	if !ok {
		return fmt.Sprintf("- goal `%s`: **MISSED** (met in %d of %d runs)", goal, met, n)
	}
	return fmt.Sprintf("- goal `%s`: met (in %d of %d runs)", goal, met, n)
}

// judge counts the runs that met a goal (1) among n, a failed run counting as missed; the goal is
// met when more than half met it.
func judge(vs []float64, failed int) (met, n int, ok bool) {
	for _, v := range vs {
		if v == 1 {
			met++
		}
	}
	n = len(vs) + failed
	return met, n, 2*met > n
}

// missedGoals lists the benchmarks with a goal missed by the majority rule, or a failed run:
// "<package>\t<name>\t<goal>,<goal>" (FAILED among the goals when a run failed), in the order
// the run reported them.
func missedGoals(results []*result) []string {
	var out []string
	for _, r := range results {
		var why []string
		if r.failed > 0 {
			why = append(why, "FAILED")
		}
		for _, u := range r.units {
			if g, isGoal := strings.CutPrefix(u, goalPrefix); isGoal {
				if _, _, ok := judge(r.runs[u], r.failed); !ok {
					why = append(why, g)
				}
			}
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s\t%s\t%s", r.pkg, r.name, strings.Join(why, ",")))
		}
	}
	return out
}

func readMeta(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path) //nolint:gosec // G304: the run directory the caller named
	if err != nil {
		return nil, fmt.Errorf("the run's meta.txt (machine, date, commit): %w", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"run", "date", "commit", "host", "cpus", "cpu", "memory", "go", "packages"} {
		if m[k] == "" {
			return nil, fmt.Errorf("%s has no %q line", path, k)
		}
	}
	return m, nil
}

// parse reads Go's benchmark format: "pkg: ..." lines and result lines
// ("BenchmarkX-2  N  v unit  v unit ..."); everything else (logs, PASS, ok) is skipped.
func parse(r io.Reader) ([]*result, error) {
	var out []*result
	byName := map[string]*result{}
	pkg := ""
	// unnamed are results seen before their package was named: go test prints a package's
	// "pkg:" line with its first result line, so a benchmark that fails before any of its
	// package's benchmarks reported learns its package from the next "pkg:" line or from the
	// package's closing "ok"/"FAIL" line, whichever comes first.
	var unnamed []*result
	settle := func(p string) {
		for _, res := range unnamed {
			delete(byName, " "+res.name)
			res.pkg = p
			byName[p+" "+res.name] = res
		}
		unnamed = nil
	}
	// resultFor is the result of the benchmark named in a line ("BenchmarkX-2") of package pkg.
	resultFor := func(field string) *result {
		name := trimProcs(field)
		res := byName[pkg+" "+name]
		if res == nil {
			res = &result{name: name, pkg: pkg, runs: map[string][]float64{}}
			byName[pkg+" "+name] = res
			out = append(out, res)
			if pkg == "" {
				unnamed = append(unnamed, res)
			}
		}
		return res
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	// lastFail is the name in the last "--- FAIL:" line since a benchmark line: go test reports one
	// failed run of a top-level benchmark twice, as "BenchmarkX" and then "BenchmarkX-2".
	lastFail := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg, lastFail = strings.TrimPrefix(line, "pkg: "), ""
			settle(pkg)
		case strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "FAIL\t"):
			// A package's closing line ("ok  \t<pkg>\t1.2s", "FAIL\t<pkg>\t1.2s"): what follows
			// is another package's.
			if f := strings.Split(line, "\t"); len(f) >= 2 {
				settle(strings.TrimSpace(f[1]))
			}
			pkg, lastFail = "", ""
		case strings.HasPrefix(line, "--- FAIL: Benchmark"):
			// A benchmark that failed prints no result line in that run: count it, so that it
			// shows as failed instead of disappearing.
			name := strings.Fields(strings.TrimPrefix(line, "--- FAIL: "))[0]
			if lastFail != "" && name != lastFail && trimProcs(name) == trimProcs(lastFail) {
				lastFail = ""
				continue // the same failed run, named again with its GOMAXPROCS suffix
			}
			lastFail = name
			resultFor(name).failed++
		case strings.HasPrefix(line, "Benchmark"):
			lastFail = ""
			fields := strings.Fields(line)
			if len(fields) < 4 || len(fields)%2 != 0 {
				continue // a benchmark's name printed alone, before its logs
			}
			if _, err := strconv.Atoi(fields[1]); err != nil {
				continue
			}
			res := resultFor(fields[0])
			res.reported++
			for i := 2; i+1 < len(fields); i += 2 {
				v, err := strconv.ParseFloat(fields[i], 64)
				if err != nil {
					return nil, fmt.Errorf("%q: %q is not a number", line, fields[i])
				}
				u := fields[i+1]
				if _, seen := res.runs[u]; !seen {
					res.units = append(res.units, u)
				}
				res.runs[u] = append(res.runs[u], v)
			}
		}
	}
	return out, sc.Err()
}

// trimProcs drops the "-2" GOMAXPROCS suffix go test adds to a benchmark's name.
func trimProcs(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// num prints a figure with three significant digits, whole numbers as they are.
func num(v float64) string {
	if v == float64(int64(v)) && v < 1e15 && v > -1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
