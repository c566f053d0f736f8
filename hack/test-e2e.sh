#!/usr/bin/env bash
# Runs the e2e suite (e2e/, build tag e2e) as three processes side by side: TestWholeSystem (the
# system in containers under faults, mostly spent waiting on the system), the tests on the
# real-node cluster (make cluster-up: TestClusterInstall, TestTiltfileOnTheRealNode; the helm
# installs an operator does, mostly spent waiting on pods), and every other test. Each uses its
# own ports (AGENTPLANE_PORT_OFFSET 6000 and 8500 against the others: TestStacksSideBySideShareNoPort), Docker network,
# node network and temporary folders, so they do not meet. The whole-system lines are prefixed
# "[system] " (and kept unprefixed in $E2E_SYSTEM_LOG when set), the cluster's "[cluster] ".
#
#   AGENTPLANE_E2E_SERIAL=1   one process, one test after another (as `go test` runs them)
#   E2E_RUN=regexp            only the tests it matches (passed to -test.run), in one process
set -uo pipefail
cd "$(dirname "$0")/../e2e"
# Each of the three processes' go test timeout. The other tests' process took over 47 minutes in
# the stop-54 CI (2026-12-05, two loaded cores), close to the 50 this was; with lint 12 minutes
# shorter since, CI's 90 minutes hold an e2e tier of 60.
timeout=${E2E_TIMEOUT:-60m}
bin=$(mktemp -d)/e2e.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -tags e2e -o "$bin" . || exit 1

if [ -n "${E2E_RUN:-}" ] || [ -n "${AGENTPLANE_E2E_SERIAL:-}" ]; then
  "$bin" -test.count=1 -test.v -test.timeout "$timeout" ${E2E_RUN:+-test.run "$E2E_RUN"}
  exit $?
fi

log=${E2E_SYSTEM_LOG:-/dev/null}
out=$(dirname "$bin")
cluster_tests='^(TestClusterInstall|TestTiltfileOnTheRealNode)$'
( "$bin" -test.count=1 -test.v -test.timeout "$timeout" -test.run '^TestWholeSystem$' 2>&1 | tee "$log" "$out/system.log" | sed -u 's/^/[system] /'
  exit "${PIPESTATUS[0]}" ) &
system=$!
( "$bin" -test.count=1 -test.v -test.timeout "$timeout" -test.run "$cluster_tests" 2>&1 | tee "$out/cluster.log" | sed -u 's/^/[cluster] /'
  exit "${PIPESTATUS[0]}" ) &
cluster=$!
"$bin" -test.count=1 -test.v -test.timeout "$timeout" -test.skip "^TestWholeSystem\$|$cluster_tests" 2>&1 | tee "$out/rest.log"
rest=${PIPESTATUS[0]}
wait "$system"
sys=$?
wait "$cluster"
clu=$?
echo "e2e: TestWholeSystem exit $sys, the real-node cluster's tests exit $clu, the other tests exit $rest"
# The three outputs interleave and a CI log keeps only its tail: repeat what each failed
# process's tests said (their t.Error/t.Fatal/t.Log lines, the last 25) where the tail shows it.
for p in "system:$sys" "cluster:$clu" "rest:$rest"; do
  name=${p%%:*} code=${p#*:}
  [ "$code" -eq 0 ] && continue
  echo "e2e: what the $name tests said last (the full output is above):"
  grep -E '^ +[A-Za-z0-9_]+_test\.go:[0-9]+: ' "$out/$name.log" | tail -n 25 | cut -c1-2000
done
echo "e2e: the slowest tests (of all three processes):"
grep -hE '^--- (PASS|FAIL): Test[A-Za-z0-9_]+ \([0-9.]+s\)$' "$out/system.log" "$out/cluster.log" "$out/rest.log" |
  sed -E 's/^--- (PASS|FAIL): ([^ ]+) \(([0-9.]+)s\)$/\3 \1 \2/' | sort -rn | head -n 12 |
  awk '{ printf "    %4dm%02ds %s %s\n", $1 / 60, $1 % 60, $2, $3 }'
[ "$sys" -eq 0 ] && [ "$clu" -eq 0 ] && [ "$rest" -eq 0 ]
