#!/usr/bin/env bash
# Writes the templates every service chart shares (charts/_shared) into each service chart, with
# the chart's name for CHART. `make generate` runs it; `make verify-gen` checks the result.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
for chart in status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway; do
  for src in "$ROOT"/charts/_shared/*.yaml "$ROOT"/charts/_shared/*.tpl "$ROOT"/charts/_shared/tests/*.yaml; do
    name=${src#"$ROOT"/charts/_shared/}
    out="$ROOT/charts/$chart/templates/$name"
    mkdir -p "$(dirname "$out")"
    {
      echo "{{- /* Generated from charts/_shared/$name by make generate: edit it there. */}}"
      sed "s/CHART/$chart/g" "$src"
    } >"$out"
  done
done
# Redis settings, for the charts of services that use Redis.
for chart in event-emitter watch-gateway; do
  for src in "$ROOT"/charts/_shared/redis/*.tpl; do
    name=${src#"$ROOT"/charts/_shared/redis/}
    {
      echo "{{- /* Generated from charts/_shared/redis/$name by make generate: edit it there. */}}"
      sed "s/CHART/$chart/g" "$src"
    } >"$ROOT/charts/$chart/templates/$name"
  done
done
