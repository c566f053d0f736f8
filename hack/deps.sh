#!/usr/bin/env bash
# Installs the Debian packages agentplane's tests and local stack use: redis-server (Redis for
# event-emitter and the tests), openssl (keys for the local kube-apiserver), curl, and gcc (the
# race detector, which `make test` runs the unit and integration tiers under, needs cgo),
# ca-certificates (the CA bundle `make images` puts in every image), jq (the README reads
# Jaeger's API with it), and chromium (the web console's tests drive it through chromedp, headless).
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=sudo; else
    echo "missing ${need[*]}: install them with your package manager (Debian: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi
echo ">> installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
