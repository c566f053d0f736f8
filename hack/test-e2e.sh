#!/usr/bin/env bash
# Runs the e2e suite (e2e/, build tag e2e) as two processes side by side: TestWholeSystem (the
# system in containers under faults, about half of the suite's time, mostly spent waiting on the
# system) and every other test. Each uses its own ports (AGENTPLANE_PORT_OFFSET 6000 against
# 1000/3000), Docker network and temporary folders, so they do not meet. The whole-system lines
# are prefixed "[system] " (and kept unprefixed in $E2E_SYSTEM_LOG when set).
#
#   AGENTPLANE_E2E_SERIAL=1   one process, one test after another (as `go test` runs them)
#   E2E_RUN=regexp            only the tests it matches (passed to -test.run), in one process
set -uo pipefail
cd "$(dirname "$0")/../e2e"
timeout=${E2E_TIMEOUT:-50m}
bin=$(mktemp -d)/e2e.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -tags e2e -o "$bin" . || exit 1

if [ -n "${E2E_RUN:-}" ] || [ -n "${AGENTPLANE_E2E_SERIAL:-}" ]; then
  "$bin" -test.count=1 -test.v -test.timeout "$timeout" ${E2E_RUN:+-test.run "$E2E_RUN"}
  exit $?
fi

log=${E2E_SYSTEM_LOG:-/dev/null}
( "$bin" -test.count=1 -test.v -test.timeout "$timeout" -test.run '^TestWholeSystem$' 2>&1 | tee "$log" | sed -u 's/^/[system] /'
  exit "${PIPESTATUS[0]}" ) &
system=$!
"$bin" -test.count=1 -test.v -test.timeout "$timeout" -test.skip '^TestWholeSystem$'
rest=$?
wait "$system"
sys=$?
echo "e2e: TestWholeSystem exit $sys, the other tests exit $rest"
[ "$sys" -eq 0 ] && [ "$rest" -eq 0 ]
