#!/usr/bin/env bash
# Generates the typed clients of the agentplane API groups (clientset, listers, informers and
# apply configurations) into libs/api/client with k8s.io/code-generator's generators, which
# `make generate` builds into $CODEGEN_BIN. Inputs: the +genclient kinds of libs/api/*/v1alpha1.
set -euo pipefail
bin=${CODEGEN_BIN:?set CODEGEN_BIN to the directory of client-gen, lister-gen, informer-gen and applyconfiguration-gen}
root=$(cd "$(dirname "$0")/.." && pwd)
mod=github.com/agentplane/agentplane/libs
out=$root/libs/api/client
header=$root/hack/boilerplate.go.txt
groups=(agents/v1alpha1 orchestration/v1alpha1)
pkgs=()
for g in "${groups[@]}"; do pkgs+=("$mod/api/$g"); done

cd "$root/libs"
rm -rf "$out"
"$bin/applyconfiguration-gen" --go-header-file "$header" \
  --output-dir "$out/applyconfiguration" --output-pkg "$mod/api/client/applyconfiguration" "${pkgs[@]}"
inputs=()
for g in "${groups[@]}"; do inputs+=(--input "$g"); done
"$bin/client-gen" --go-header-file "$header" \
  --output-dir "$out/clientset" --output-pkg "$mod/api/client/clientset" --clientset-name versioned \
  --apply-configuration-package "$mod/api/client/applyconfiguration" \
  --input-base "$mod/api" "${inputs[@]}"
"$bin/lister-gen" --go-header-file "$header" \
  --output-dir "$out/listers" --output-pkg "$mod/api/client/listers" "${pkgs[@]}"
"$bin/informer-gen" --go-header-file "$header" \
  --output-dir "$out/informers" --output-pkg "$mod/api/client/informers" \
  --versioned-clientset-package "$mod/api/client/clientset/versioned" \
  --listers-package "$mod/api/client/listers" "${pkgs[@]}"
