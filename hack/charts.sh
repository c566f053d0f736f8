#!/usr/bin/env bash
# Packages every chart (the CRDs, the six services and the one-release chart) as
# CHART_VERSION with appVersion APP_VERSION (the image tag they deploy) into OUT, and with
# PUSH=1 pushes them as OCI artifacts to oci://$REGISTRY/charts. The charts in the tree say
# 0.1.0; the packaged ones name the commit, as the images do.
#   make charts-package          # bin/charts/*.tgz
#   make push REGISTRY=...       # images and charts
#
# SRC (default: this tree) is the tree whose charts/ to package (an earlier commit's worktree).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${SRC:-$ROOT}
: "${HELM:?}" "${CHART_VERSION:?}" "${APP_VERSION:?}" "${OUT:?}"
[ -x "$HELM" ] || { echo "error: $HELM is missing: run make tools" >&2; exit 1; }
CHARTS="agentplane-crds agentplane-lib status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway agentplane"
# An earlier commit's tree (SRC) may lack some (the library chart came later).
present() { for c in $CHARTS; do [ -d "$SRC/charts/$c" ] && echo "$c"; done; }
CHARTS=$(present | tr '\n' ' ')

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# A copy of charts/ whose Chart.yaml files (and their dependencies) carry the versions; the
# tree's own stay as they are. Its dependencies are built afresh from the copy.
cp -a "$SRC/charts" "$stage/charts"
rm -rf "$stage"/charts/*/charts "$stage"/charts/*/Chart.lock "$stage"/charts/.deps-*
for c in $CHARTS; do
  sed -i -E -e "s/^version: .*/version: $CHART_VERSION/" -e "s/^appVersion: .*/appVersion: \"$APP_VERSION\"/" \
    -e "s/^(    version: ).*/\1$CHART_VERSION/" "$stage/charts/$c/Chart.yaml"
done
CHARTS_DIR=$stage/charts HELM=$HELM "$ROOT/hack/charts-deps.sh"
mkdir -p "$OUT"
for c in $CHARTS; do
  rm -f "$OUT/$c-"[0-9]*.tgz
  "$HELM" package "$stage/charts/$c" --destination "$OUT" >/dev/null
done
echo ">> charts $CHART_VERSION (appVersion $APP_VERSION) in $OUT"

if [ "${PUSH:-0}" = 1 ]; then
  : "${REGISTRY:?}"
  flags=()
  case ${REGISTRY%%/*} in
    localhost | localhost:* | 127.* ) flags=(--plain-http) ;;
  esac
  # shellcheck disable=SC2206
  [ -n "${HELM_PUSH_FLAGS:-}" ] && flags=($HELM_PUSH_FLAGS)
  for c in $CHARTS; do
    if ! log=$("$HELM" push "$OUT/$c-$CHART_VERSION.tgz" "oci://$REGISTRY/charts" "${flags[@]}" 2>&1); then
      echo "$log" >&2
      echo "error: helm push to oci://$REGISTRY/charts failed (for a registry that needs it: helm registry login ${REGISTRY%%/*})" >&2
      exit 1
    fi
    echo ">> oci://$REGISTRY/charts/$c:$CHART_VERSION"
  done
fi
