#!/usr/bin/env bash
# Runs the integration tier ROUNDS times (default 5) in a row under the race detector while
# stress-ng keeps both cores busy, so a test that leans on timing fails here rather than on a
# loaded CI machine. Installs stress-ng from Debian's packages when it is missing. Stops at the
# first failing round and says which.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
pkgs=${PKGS:?PKGS: the packages to test}

if ! command -v stress-ng >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo ">> installing stress-ng"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends stress-ng >/dev/null
fi

echo ">> test-stress: compiling $(date +%T)"
# shellcheck disable=SC2086
CGO_ENABLED=1 go test -race -count=1 -tags integration -exec /bin/true $pkgs >/dev/null

cpus=$(nproc)
stress-ng --cpu "$cpus" --cpu-method matrixprod --quiet &
load=$!
trap 'kill $load 2>/dev/null || true; wait $load 2>/dev/null || true' EXIT
echo ">> test-stress: stress-ng on $cpus cores (pid $load)"

for i in $(seq 1 "$rounds"); do
  echo ">> test-stress: round $i of $rounds $(date +%T)"
  # shellcheck disable=SC2086
  if ! CGO_ENABLED=1 go test -race -count=1 -tags integration -p 1 $pkgs; then
    echo ">> test-stress: round $i of $rounds FAILED $(date +%T)" >&2
    exit 1
  fi
done
echo ">> test-stress: $rounds rounds passed under load $(date +%T)"
