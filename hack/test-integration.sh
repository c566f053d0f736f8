#!/usr/bin/env bash
# The integration tier (make test-integration): every package with an integration test, that is a
# _test.go file whose build line names the `integration` tag. Any other package builds under
# -tags integration the very test binary `make test-unit` has just run (no other file carries
# the tag), so running it here again would only repeat the unit tier.
#
# Each package's race-instrumented test binary is built once, two builds at a time, then the
# binaries run one after another, each in its package's folder as `go test` runs it: each test
# binary starts its own kube-apiserver, etcd or redis-server, and two side by side on two cores
# starve each other's deadlines. (`go test -p 1` would also have linked every binary a second
# time, one at a time, after a first pass that compiled them.)
# Run by make test-integration (the module folders are its arguments). One package alone:
# `go test -race -tags integration ./libs/leader`. With --list first, it prints the package folders
# it would run and stops (e2e/ci_test.go checks them against what the tag changes).
set -uo pipefail
cd "$(dirname "$0")/.."
# The race detector needs cgo, in the test binaries and in the services they build with -race
# (testenv.BuildService): the Makefile's CGO_ENABLED=0 is for the shipped static binaries.
export CGO_ENABLED=1
# The module folders to look in: the Makefile's MODULES less e2e (its own tier), as arguments.
list=
[ "${1:-}" = --list ] && { list=1; shift; }
[ $# -gt 0 ] || { echo "usage: hack/test-integration.sh [--list] MODULE_DIR..." >&2; exit 2; }
pkgs=$(grep -rlE --include='*_test.go' '^//go:build .*\bintegration\b' "$@" | xargs -r -n1 dirname | sort -u)
[ -n "$pkgs" ] || { echo "test-integration: no package has a test file with the integration build tag" >&2; exit 1; }
[ -z "$list" ] || { printf '%s\n' $pkgs; exit 0; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

echo ">> test-integration: compiling $(date +%T)"
# shellcheck disable=SC2016 # expanded by the inner shell
if ! printf '%s\n' $pkgs | xargs -P 2 -I{} sh -c \
  'go test -race -tags integration -c -o "$1/$(echo "$2" | tr / _).test" "./$2"' _ "$dir" {}; then
  echo "test-integration: a test binary did not build (above)" >&2
  exit 1
fi

echo ">> test-integration: running $(date +%T)"
failed=()
for p in $pkgs; do
  bin=$dir/$(echo "$p" | tr / _).test
  [ -x "$bin" ] || { echo "test-integration: no test binary for ./$p" >&2; failed+=("$p"); continue; }
  mod=$(cd "$p" && go list -tags integration -f '{{.ImportPath}}' .)
  start=$(date +%s%N)
  # The flags `go test` gives a test binary by default: its 10-minute timeout, and a panic for a
  # test that calls os.Exit(0).
  (cd "$p" && "$bin" -test.paniconexit0 -test.timeout=10m0s) >"$dir/out" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  took=$(printf '%d.%03ds' $((ms / 1000)) $((ms % 1000)))
  if [ "$rc" -eq 0 ]; then
    printf 'ok  \t%s\t%s\n' "$mod" "$took"
  else
    cat "$dir/out"
    printf 'FAIL\t%s\t%s (exit %d)\n' "$mod" "$took" "$rc"
    failed+=("$p")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test-integration: FAILED in ${failed[*]}" >&2
  exit 1
fi
