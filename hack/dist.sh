#!/usr/bin/env bash
# Cross-compiles agentctl (services/agentctl/cmd/agentctl) for every platform in DIST_PLATFORMS
# (static: CGO_ENABLED=0, -trimpath, LDFLAGS stamping VERSION as `make build` does) and packages
# it to be installed without the monorepo, into DIST_DIR:
#   agentctl_<VERSION>_<os>_<arch>.tar.gz   the binary (agentctl, agentctl.exe on windows), and
#                                           LICENSE when the tree has one
#   checksums.txt                           sha256sum's format over those archives
#   krew/agentplane.yaml                    a krew plugin manifest (hack/krew/agentplane.yaml.tmpl):
#                                           a platform per archive, uri $DIST_URL/<archive>
#   make dist                                               # all six platforms, into dist/
#   make dist DIST_PLATFORMS="linux/amd64 darwin/arm64"     # only those
#   make dist DIST_URL=https://github.com/me/agentplane/releases/download/v0.2.0 VERSION=v0.2.0
#
# The krew manifest's version must be semver: VERSION when it is one (v1.2.3, a release), else
# v$CHART_VERSION (the charts' version with the commit as a pre-release, as `make push` names them).
# Archives and the manifest of an earlier run in DIST_DIR are replaced.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${VERSION:?}" "${LDFLAGS:?}" "${CHART_VERSION:?}"
DIST_DIR=${DIST_DIR:-$ROOT/dist}
DIST_PLATFORMS=${DIST_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}
DIST_URL=${DIST_URL:-https://example.invalid/agentplane/releases/$VERSION}
semver='^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
if [[ $VERSION =~ $semver ]]; then plugin_version=$VERSION; else plugin_version=v$CHART_VERSION; fi
[[ $plugin_version =~ $semver ]] || { echo "error: the krew manifest needs a semver version; $plugin_version is not one (set VERSION=v1.2.3)" >&2; exit 1; }
case $VERSION in */* | *" "*) echo "error: VERSION=$VERSION cannot be part of a file name" >&2; exit 1 ;; esac

# The archives' files carry the commit's time, so the same commit packs the same bytes.
mtime=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
license=()
if [ -f "$ROOT/LICENSE" ]; then license=(LICENSE); fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$DIST_DIR"
DIST_DIR=$(cd "$DIST_DIR" && pwd)
rm -f "$DIST_DIR"/agentctl_*.tar.gz "$DIST_DIR/checksums.txt"
rm -rf "$DIST_DIR/krew"

archives=() platforms=
for p in $DIST_PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  case $os in linux | darwin | windows) ;; *) echo "error: DIST_PLATFORMS: $p: os must be linux, darwin or windows" >&2; exit 2 ;; esac
  case $arch in amd64 | arm64) ;; *) echo "error: DIST_PLATFORMS: $p: arch must be amd64 or arm64" >&2; exit 2 ;; esac
  bin=agentctl
  if [ "$os" = windows ]; then bin=agentctl.exe; fi
  name=agentctl_${VERSION}_${os}_${arch}.tar.gz
  dir=$stage/${os}_$arch
  mkdir -p "$dir"
  t=$SECONDS
  (cd "$ROOT" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$LDFLAGS" -o "$dir/$bin" ./services/agentctl/cmd/agentctl)
  if [ ${#license[@]} -gt 0 ]; then cp "$ROOT/LICENSE" "$dir/"; fi
  tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - "$bin" "${license[@]}" | gzip -n >"$DIST_DIR/$name"
  echo ">> $os/$arch: $name ($((SECONDS - t)) s)"
  archives+=("$name")
  sum=$(sha256sum "$DIST_DIR/$name" | cut -d' ' -f1)
  platforms+="  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $DIST_URL/$name
    sha256: $sum
    bin: $bin
    files:
    - from: $bin
      to: .
"
  if [ ${#license[@]} -gt 0 ]; then
    platforms+="    - from: LICENSE
      to: .
"
  fi
done
[ ${#archives[@]} -gt 0 ] || { echo "error: DIST_PLATFORMS is empty" >&2; exit 2; }

(cd "$DIST_DIR" && sha256sum "${archives[@]}" >checksums.txt)

mkdir -p "$DIST_DIR/krew"
manifest=$DIST_DIR/krew/agentplane.yaml
PLATFORMS=$platforms PLUGIN_VERSION=$plugin_version awk '
  /^#/ { next }
  $0 == "@PLATFORMS@" { printf "%s", ENVIRON["PLATFORMS"]; next }
  { gsub(/@VERSION@/, ENVIRON["PLUGIN_VERSION"]); print }
' "$ROOT/hack/krew/agentplane.yaml.tmpl" >"$manifest"

echo ">> agentctl $VERSION in $DIST_DIR:"
for a in "${archives[@]}"; do echo "   $DIST_DIR/$a"; done
echo "   $DIST_DIR/checksums.txt"
echo "   $manifest (krew plugin agentplane $plugin_version, uri $DIST_URL/...)"
