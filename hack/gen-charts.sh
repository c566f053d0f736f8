#!/usr/bin/env bash
# Writes the templates every service chart shares (charts/_shared) into each service chart, with
# the chart's name for CHART. `make generate` runs it; `make verify-gen` checks the result.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
for chart in status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway; do
  for src in "$ROOT"/charts/_shared/*; do
    name=$(basename "$src")
    [ "$name" = README.md ] && continue
    out="$ROOT/charts/$chart/templates/$name"
    {
      echo "{{- /* Generated from charts/_shared/$name by make generate: edit it there. */}}"
      sed "s/CHART/$chart/g" "$src"
    } >"$out"
  done
done
