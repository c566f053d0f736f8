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
CHARTS="agentplane-crds status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway agentplane"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# A copy of charts/ (the one-release chart's links into it stay relative, so they point into the
# copy) whose Chart.yaml files carry the versions; the tree's own stay as they are.
cp -a "$SRC/charts" "$stage/charts"
base=$(awk '/^version:/{print $2; exit}' "$SRC/charts/agentplane/Chart.yaml")
for c in $CHARTS; do
  sed -i -E -e "s/^version: .*/version: $CHART_VERSION/" -e "s/^appVersion: .*/appVersion: \"$APP_VERSION\"/" \
    -e "s/^(    version: )$base\$/\1$CHART_VERSION/" "$stage/charts/$c/Chart.yaml"
done
mkdir -p "$OUT"
for c in $CHARTS; do
  rm -f "$OUT/$c-"[0-9]*.tgz
  # Helm warns about each link it follows in the one-release chart (charts/agentplane/files).
  "$HELM" package "$stage/charts/$c" --destination "$OUT" 2> >(grep -v "found symbolic link" >&2) >/dev/null
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
