#!/usr/bin/env bash
# Builds one image per service from the static binaries in $BIN (`make build`) with
# build/Dockerfile, tagged $IMAGE_REGISTRY/agentplane/<service>:$IMAGE_TAG (no registry: just
# agentplane/<service>). The CA bundle comes from this machine (Debian's ca-certificates).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${BIN:?}" "${SERVICES:?}" "${IMAGE_TAG:?}"
CA=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$CA" ] || { echo "error: no CA bundle at $CA: install ca-certificates (make deps)" >&2; exit 1; }
command -v docker >/dev/null || { echo "error: docker is needed to build images" >&2; exit 1; }
revision=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
prefix=${IMAGE_REGISTRY:+$IMAGE_REGISTRY/}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$CA" "$ctx/ca-certificates.crt"
for svc in $SERVICES; do
  [ -x "$BIN/$svc" ] || { echo "error: $BIN/$svc is missing: run make build" >&2; exit 1; }
  cp "$BIN/$svc" "$ctx/$svc"
  image="${prefix}agentplane/$svc:$IMAGE_TAG"
  echo ">> $image"
  if ! out=$(docker build -q -f "$ROOT/build/Dockerfile" --build-arg SERVICE="$svc" --build-arg VERSION="$IMAGE_TAG" \
    --build-arg REVISION="$revision" -t "$image" "$ctx" 2>&1); then
    echo "$out" >&2
    exit 1
  fi
  rm "$ctx/$svc"
done
