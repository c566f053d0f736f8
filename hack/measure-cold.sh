#!/usr/bin/env bash
# Measures a command on a fresh clone of HEAD with empty Go caches (module, build and toolchain
# caches; the apt packages are what this machine has), as a fresh machine would run it:
#   hack/measure-cold.sh up      # make up, then examples/agentrun.yaml to Succeeded, then make down
#   hack/measure-cold.sh cluster-up   # make cluster-up (root, Docker), then make cluster-down
#   hack/measure-cold.sh ci      # bash .ci/run
# The output (with every step's time) goes to docs/measurements/<what>-cold-<date>-<commit>.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
what=${1:?usage: hack/measure-cold.sh up|cluster-up|ci}
commit=$(git -C "$ROOT" rev-parse --short HEAD)
work=$(mktemp -d /tmp/agentplane-cold-XXXX)
out=$ROOT/docs/measurements/$what-cold-$(date +%Y%m%d)-$commit.txt
mkdir -p "$(dirname "$out")"
git clone -q "$ROOT" "$work/repo"
cd "$work/repo"
# On a bare machine (this user's Go module and build caches empty, no bin/ in the checkout) the
# measurement uses those caches and leaves its bin/ in the checkout: still cold, and the machine is
# warm afterwards. Otherwise it uses empty caches of its own and removes them.
keep=
if [ -z "$(ls -A "$(GOTOOLCHAIN=local go env GOMODCACHE)" 2>/dev/null)" ] && [ -z "$(ls -A "$(GOTOOLCHAIN=local go env GOCACHE)" 2>/dev/null | grep -v README)" ] && [ ! -e "$ROOT/bin" ]; then
  keep=1
else
  export GOMODCACHE=$work/gomod GOCACHE=$work/gocache GOPATH=$work/gopath
fi
{
  echo "# hack/measure-cold.sh $what on a fresh clone of $commit, empty Go caches, $(date -u +%FT%TZ), $(nproc) cores"
  start=$SECONDS
  case $what in
    up)
      AGENTPLANE_PORT_OFFSET=9000 make up
      echo "make up cold: $((SECONDS - start)) s"
      kubectl=$(ls bin/tools/kube/*/kubectl)
      "$kubectl" --kubeconfig .local/kubeconfig apply -f examples/agent.yaml -f examples/agentrun.yaml
      "$kubectl" --kubeconfig .local/kubeconfig wait --for=jsonpath='{.status.phase}'=Succeeded agentrun/hello --timeout 2m
      AGENTPLANE_PORT_OFFSET=9000 make down
      ;;
    cluster-up)
      # As root with Docker; the default cluster's name, network and ports (not the e2e suite's).
      make cluster-up
      echo "make cluster-up cold: $((SECONDS - start)) s"
      make cluster-down
      ;;
    ci)
      bash .ci/run
      echo ".ci/run cold: $((SECONDS - start)) s"
      ;;
    *) echo "usage: hack/measure-cold.sh up|cluster-up|ci" >&2; exit 2 ;;
  esac
} 2>&1 | tee "$out.full" | grep -E '^(#|>> |== |real|make up|make cluster-up|\.ci/run|e2e: |ok |FAIL|--- FAIL)|condition met' >"$out" || true
echo "summary in $out (full output in $out.full, not committed)"
if [ -n "$keep" ] && [ -d "$work/repo/bin" ]; then mv "$work/repo/bin" "$ROOT/bin"; fi
chmod -R u+w "$work" 2>/dev/null || true
rm -rf "$work"
