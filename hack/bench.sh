#!/usr/bin/env bash
# Runs every benchmark and keeps the results: one directory per run under .bench/ (git-ignored),
# named after the time and commit, with meta.txt (the machine, date and commit), each tier's
# whole output (integration.log, e2e.log) and its results in Go's benchmark format
# (integration.txt, e2e.txt), which `make bench-report`
# turns into docs/benchmarks.md's generated section and benchstat reads. The integration
# benchmarks run one package at a time (-p 1), so no two measure at once. PKGS names the
# integration packages; BENCH_E2E=0 leaves out the four e2e benchmarks (a partial run, which
# meta.txt says).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=${PKGS:?PKGS: the integration packages}
count=${BENCH_COUNT:-1}

commit=$(git rev-parse --short HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
dir=.bench/$(date -u +%Y%m%dT%H%M%SZ)-$commit
mkdir -p "$dir"
{
  echo "run: $(basename "$dir")"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $commit"
  echo "host: $(hostname)"
  echo "cpus: $(nproc)"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "memory: $(awk '/^MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "go: $(go env GOVERSION)"
  echo "packages: $pkgs$([ "${BENCH_E2E:-1}" != 0 ] && echo ' and the e2e benchmarks')"
} > "$dir/meta.txt"
echo ">> bench: results in $dir"

# Each tier's whole output goes to <tier>.log; <tier>.txt keeps the benchmark format only (the
# configuration lines, the results, and the goal verdicts the benchmarks logged).
results() { grep -E '^(goos|goarch|pkg|cpu): |^Benchmark|^--- (BENCH|FAIL)|^ +[^ ].*(goal met|GOAL MISSED)|^(ok|FAIL|PASS)' "$1.log" > "$1.txt" || true; }
# shellcheck disable=SC2086
go test -p 1 -count="$count" -run '^$' -bench . -benchmem -tags integration $pkgs 2>&1 | tee "$dir/integration.log"
results "$dir/integration"
if [ "${BENCH_E2E:-1}" != 0 ]; then
  (cd e2e && go test -count="$count" -run '^$' -bench 'RunControllerThousandRuns|CancelHundredRunningJobs|ConsoleRuns|StatusWritesUnderAttack' -benchtime 1x \
    -timeout 45m -tags e2e .) 2>&1 | tee "$dir/e2e.log"
  results "$dir/e2e"
fi
echo ">> bench: results in $dir; \`make bench-report\` writes them into docs/benchmarks.md"
