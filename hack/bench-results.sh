#!/usr/bin/env bash
# Extracts the benchmark format from a `go test -bench` log (hack/bench.sh's <tier>.log): the
# configuration lines, the results, the goal verdicts the benchmarks logged, and how each package
# ended. Go prints a result's name before the benchmark runs and its figures after, so a line the
# benchmark logs meanwhile splits the two ("BenchmarkX-2  <log line>" ... "  1  48.1 s ..."): the
# figures are joined back to their name, or that run would be missing from the report.
#
#	hack/bench-results.sh < integration.log > integration.txt
set -euo pipefail
awk '
  /^(goos|goarch|pkg|cpu): / || /^--- (BENCH|FAIL)/ || /^ +[^ ].*(goal met|GOAL MISSED)/ || /^(ok|FAIL|PASS)/ { print; next }
  /^Benchmark[^ \t]*[ \t]+[0-9]+\t/ { print; pending = ""; next }
  /^Benchmark[^ \t]*/ { pending = $1; next }
  pending != "" && /^[ \t]*[0-9]+\t/ { sub(/^[ \t]*/, ""); print pending "\t" $0; pending = ""; next }
'
