#!/usr/bin/env bash
# Builds one image per service, agentctl and the example agent (examples/agent) for linux, and
# with PUSH=1 pushes them: $IMAGE_REGISTRY/agentplane/<name>:$IMAGE_TAG (no registry: just
# agentplane/<name>). The binaries are built here for GOOS=linux and IMAGE_ARCH (default: this
# machine's architecture), static (CGO_ENABLED=0), whatever the machine builds for itself;
# build/Dockerfile wraps each in a FROM-scratch image with a CA bundle.
#   make images                                  # agentplane/<name>:<commit>
#   make push REGISTRY=ghcr.io/me                # build, then push images and charts
#
# SRC (default: this tree) is the source tree to build, e.g. a worktree of an earlier commit
# (e2e/cluster_test.go upgrades from the previous commit's images and charts that way).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${SRC:-$ROOT}
: "${BIN:?}" "${SERVICES:?}" "${IMAGE_TAG:?}" "${LDFLAGS:?}"
IMAGE_ARCH=${IMAGE_ARCH:-$(go env GOARCH)}
command -v docker >/dev/null || { echo "error: docker is needed to build images" >&2; exit 1; }

# The CA bundle (so that OTLP over https and rediss:// can verify their servers): CA_BUNDLE, or
# where Debian/Ubuntu, Fedora/RHEL, Alpine, macOS and the BSDs keep theirs.
CA=${CA_BUNDLE:-}
if [ -z "$CA" ]; then
  for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem \
    /etc/ssl/cert.pem /usr/local/etc/ssl/cert.pem /usr/local/share/certs/ca-root-nss.crt; do
    if [ -s "$f" ]; then CA=$f; break; fi
  done
fi
[ -n "$CA" ] && [ -s "$CA" ] || { echo "error: no CA bundle found: install ca-certificates (make deps) or set CA_BUNDLE=/path/to/bundle.pem" >&2; exit 1; }

revision=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
prefix=${IMAGE_REGISTRY:+$IMAGE_REGISTRY/}
out=$BIN/linux_$IMAGE_ARCH
mkdir -p "$out"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$CA" "$ctx/ca-certificates.crt"

names=$SERVICES
# Trees from before the example agent have none to build.
[ -d "$SRC/examples/agent" ] && names="$names agent"
for name in $names; do
  # The module and the main package in it.
  case $name in
    agent) mod=examples/agent pkg=. ;;
    *) mod=services/$name pkg=./cmd/$name ;;
  esac
  (cd "$SRC/$mod" && CGO_ENABLED=0 GOOS=linux GOARCH=$IMAGE_ARCH go build -trimpath -ldflags "$LDFLAGS" -o "$out/$name" "$pkg")
  cp "$out/$name" "$ctx/$name"
  image="${prefix}agentplane/$name:$IMAGE_TAG"
  echo ">> $image (linux/$IMAGE_ARCH)"
  if ! log=$(docker build -q --platform "linux/$IMAGE_ARCH" -f "$SRC/build/Dockerfile" --build-arg SERVICE="$name" \
    --build-arg VERSION="$IMAGE_TAG" --build-arg REVISION="$revision" -t "$image" "$ctx" 2>&1); then
    echo "$log" >&2
    exit 1
  fi
  rm "$ctx/$name"
  if [ "${PUSH:-0}" = 1 ]; then
    docker push -q "$image" >/dev/null || { echo "error: docker push $image failed (for a registry that needs it: docker login ${IMAGE_REGISTRY%%/*})" >&2; exit 1; }
  fi
done
