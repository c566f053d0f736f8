#!/usr/bin/env bash
# Installs the Debian packages agentplane needs, for one purpose:
#   up       make up: redis-server (Redis for event-emitter and watch-gateway), postgresql (the
#            run archive job-gc writes to), openssl (keys for the local kube-apiserver), curl,
#            ca-certificates (the CA bundle images carry)
#   cluster  make cluster-up: up's, and the node's: the CNI plugins (containernetworking-plugins),
#            iptables (kube-proxy), ipset and conntrack, util-linux's nsenter, iproute2
#   test     make test: cluster's, and gcc (the race detector needs cgo), jq (the README reads
#            Jaeger's API with it), chromium (the web console's browser test) and graphviz
#            (make generate renders docs/overview.svg; CI checks it is current), yamllint and git
#            (ct lint, the charts' lint)
# containerd and runc come with the Docker engine the tests already need.
set -euo pipefail
purpose=${1:-test}

need=()
want() { # want COMMAND-OR-FILE PACKAGE...
  case $1 in
    /*) [ -e "$1" ] && return 0 ;;
    *) command -v "$1" >/dev/null 2>&1 && return 0 ;;
  esac
  shift
  need+=("$@")
}
want redis-server redis-server
want openssl openssl
want curl curl
want /etc/ssl/certs/ca-certificates.crt ca-certificates
want psql postgresql
# The server, not only the client psql: Debian keeps it off PATH.
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || command -v postgres >/dev/null 2>&1 || need+=(postgresql)
case $purpose in
  up) ;;
  cluster | test)
    want /usr/lib/cni/bridge containernetworking-plugins
    want iptables iptables
    want ipset ipset
    want conntrack conntrack
    want nsenter util-linux
    want ip iproute2
    ;;&
  test)
    want gcc gcc libc6-dev
    want jq jq
    want chromium chromium fonts-dejavu-core
    want dot graphviz
    want yamllint yamllint
    want git git
    ;;
  cluster) ;;
  *) echo "usage: hack/deps.sh up|cluster|test" >&2; exit 2 ;;
esac
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
