#!/usr/bin/env bash
# Runs every benchmark and keeps the results: one directory per run under .bench/ (git-ignored),
# named after the time and commit, with meta.txt (the machine, date and commit), each tier's
# whole output (integration.log, e2e.log) and its results in Go's benchmark format
# (integration.txt, e2e.txt), which `make bench-report`
# turns into docs/benchmarks.md's generated section and benchstat reads. The integration
# benchmarks run one package at a time (-p 1), so no two measure at once. PKGS names the
# integration packages; BENCH_E2E=0 leaves out the four e2e benchmarks (a partial run, which
# meta.txt says).
#
# The report is of HEAD: a tree with changes (untracked files too) is refused before anything is
# written. A tier whose `go test` fails still keeps what it printed, meta.txt says which tier
# failed and how, the next tier still runs, and the script exits 1 at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=${PKGS:?PKGS: the integration packages}
count=${BENCH_COUNT:-3}

if [ -n "$(git status --porcelain)" ]; then
  echo "make bench measures HEAD, and this tree has changes (git status --porcelain):" >&2
  git status --porcelain | head -n 10 >&2
  echo "commit or stash them, then run it again" >&2
  exit 2
fi
commit=$(git rev-parse --short HEAD)
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
  echo "count: $count"
  echo "packages: $pkgs$([ "${BENCH_E2E:-1}" != 0 ] && echo ' and the e2e benchmarks')"
} > "$dir/meta.txt"
echo ">> bench: results in $dir"

# Each tier's whole output goes to <tier>.log; <tier>.txt keeps the benchmark format only (the
# configuration lines, the results, and the goal verdicts the benchmarks logged).
# (hack/bench-results.sh; it joins a result's figures back to its name when a log line split them).
results() { bash hack/bench-results.sh < "$1.log" > "$1.txt" || true; }
failed=0
# tier NAME COMMAND...: runs one tier's go test, keeps its output and results whatever its exit
# status, and records in meta.txt how it ended.
tier() {
  local name=$1 code
  shift
  set +e
  "$@" 2>&1 | tee "$dir/$name.log"
  code=${PIPESTATUS[0]}
  set -e
  results "$dir/$name"
  if [ "$code" -ne 0 ]; then
    echo "tier $name: FAILED (exit $code)" >> "$dir/meta.txt"
    failed=1
  elif grep -q '^--- FAIL' "$dir/$name.log"; then
    echo "tier $name: FAILED (a benchmark failed; go test exited 0)" >> "$dir/meta.txt"
    failed=1
  else
    echo "tier $name: passed" >> "$dir/meta.txt"
  fi
}
# shellcheck disable=SC2086
tier integration go test -p 1 -count="$count" -run '^$' -bench . -benchmem -tags integration $pkgs
if [ "${BENCH_E2E:-1}" != 0 ]; then
  tier e2e bash -c "cd e2e && go test -count=$count -run '^\$' -bench 'RunControllerThousandRuns|CancelHundredRunningJobs|ConsoleRuns|StatusWritesUnderAttack' -benchtime 1x -timeout $((45 * count))m -tags e2e ."
fi
echo ">> bench: results in $dir; \`make bench-report\` writes them into docs/benchmarks.md"
if [ "$failed" -ne 0 ]; then
  echo ">> bench: a tier FAILED (meta.txt says which); its results are kept and the report shows it" >&2
  exit 1
fi
