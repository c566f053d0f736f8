#!/usr/bin/env bash
# Profiles, at HEAD, every benchmark that missed a goal or failed in a `make bench` run (the
# committed report's, docs/bench-results/, or BENCH_RUN=<dir>): each runs once more, profiled,
# and the top frames of where its CPU time went and what it allocated are written as text under
# docs/measurements/profiles-<date>-<commit>/ (the profiles themselves, and each run's log, stay
# in .bench/profiles-<time>-<commit>/, git-ignored).
#
# - An integration benchmark runs under go test's -cpuprofile and -memprofile: the test process,
#   which holds the code measured and, for most, its baseline too (<name>-cpu-top.txt,
#   <name>-alloc-top.txt, each by flat then by cumulative share).
# - An e2e benchmark runs with AGENTPLANE_BENCH_PROFILES, which profiles the stack's services and
#   kube-apiserver over the part measured (<name>/<process>-top.txt and -alloc-top.txt).
#
# Profiling costs CPU, so the figures these runs print are not the report's: the report's come
# from `make bench`, unprofiled.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
run=${BENCH_RUN:-docs/bench-results}
case $run in /*) ;; *) run=$root/$run ;; esac
module=github.com/agentplane/agentplane

if [ -n "$(git status --porcelain)" ]; then
  echo "make bench-profile profiles HEAD, and this tree has changes (git status --porcelain):" >&2
  git status --porcelain | head -n 10 >&2
  echo "commit or stash them, then run it again" >&2
  exit 2
fi
missed=$(cd e2e && go run ./cmd/benchreport -run "$run" -missed)
if [ -z "$missed" ]; then
  echo ">> bench-profile: every goal of ${run#"$root"/} was met and nothing failed: nothing to profile"
  exit 0
fi
commit=$(git rev-parse --short HEAD)
out=.bench/profiles-$(date -u +%Y%m%dT%H%M%SZ)-$commit
docs=docs/measurements/profiles-$(date -u +%Y%m%d)-$commit
mkdir -p "$out"
{
  echo "commit: $commit"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs"
  echo "from the run: ${run#"$root"/} ($(sed -n 's/^run: //p' "$run/meta.txt"), commit $(sed -n 's/^commit: //p' "$run/meta.txt"))"
  echo "profiled (package, benchmark, goals missed there):"
  # shellcheck disable=SC2001
  echo "$missed" | sed 's/^/  /'
} > "$out/meta.txt"

# top PROFILE [BINARY] [pprof flags...]: the top frames by flat and by cumulative share.
top() {
  local profile=$1 binary=$2 order
  shift 2
  for order in -flat -cum; do
    echo "# go tool pprof -top $order -nodecount 30 $* ${binary:+$(basename "$binary") }$(basename "$profile")"
    # shellcheck disable=SC2086
    go tool pprof -top "$order" -nodecount 30 "$@" $binary "$profile" 2>&1
    echo
  done
}

failed=0
while IFS=$'\t' read -r pkg name goals; do
  # -bench takes one anchored pattern per level of a sub-benchmark's name.
  re=$(echo "$name" | sed 's|[^/]*|^&$|g')
  slug=$(echo "${name#Benchmark}" | tr '/' '_')
  echo ">> bench-profile: $name ($pkg; missed: $goals)"
  set +e
  if [ "$pkg" = "$module/e2e" ]; then
    (cd e2e && AGENTPLANE_BENCH_PROFILES="$root/$out/$slug" go test -tags e2e -count=1 -run '^$' \
      -bench "$re" -benchtime 1x -timeout 45m .) > "$out/$slug.log" 2>&1
  else
    go test -tags integration -count=1 -run '^$' -bench "$re" -benchmem -timeout 45m \
      -o "$out/$slug.test" -cpuprofile "$out/$slug.cpu.pb.gz" -memprofile "$out/$slug.mem.pb.gz" \
      "./${pkg#"$module"/}" > "$out/$slug.log" 2>&1
  fi
  code=$?
  set -e
  if [ "$code" -ne 0 ] || grep -q '^--- FAIL' "$out/$slug.log"; then
    echo "  $name: go test ended with exit $code or a failure (its log: $out/$slug.log); profiles kept as far as they got" | tee -a "$out/meta.txt"
    failed=1
  fi
  if [ -f "$out/$slug.cpu.pb.gz" ]; then
    top "$out/$slug.cpu.pb.gz" "$out/$slug.test" > "$out/$slug-cpu-top.txt"
    top "$out/$slug.mem.pb.gz" "$out/$slug.test" -sample_index=alloc_space > "$out/$slug-alloc-top.txt"
  fi
done <<< "$missed"

mkdir -p "$docs"
(cd "$out" && find . -name '*.txt' -print0 | xargs -0 cp --parents -t "$root/$docs")
echo ">> bench-profile: top frames in $docs (profiles and logs in $out)"
[ "$failed" -eq 0 ] || { echo ">> bench-profile: a profiled run failed (meta.txt says which)" >&2; exit 1; }
