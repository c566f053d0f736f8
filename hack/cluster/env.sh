#!/usr/bin/env bash
# Prints what a shell needs to use the cluster of hack/cluster/up.sh, for eval:
#   eval "$(make -s cluster-env)"
# KUBECONFIG, the pinned kubectl and helm and agentctl on PATH, and where the cluster's registry
# (REGISTRY, for make push and helm), Redis (REDIS_URL, as pods reach it) and the run archive's
# PostgreSQL (ARCHIVE_URL, as pods reach it; its password in ARCHIVE_PASSWORD_FILE) are.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
: "${KUBE_DIR:?}" "${HELM:?}"
cat <<ENV
export KUBECONFIG=$KUBECONFIG_FILE
export PATH=$KUBE_DIR:$(dirname "$HELM"):$ROOT/bin:\$PATH
export REGISTRY=$REGISTRY
export REDIS_URL=redis://$HOST_IP:$REDIS_PORT/0
export ARCHIVE_URL='postgres://agentplane@$HOST_IP:$POSTGRES_PORT/agentplane?sslmode=disable'
export ARCHIVE_PASSWORD_FILE=$LOCAL_DIR/postgres-password
ENV
