{{/*
The container's environment as a YAML list:

  1. what every service reads (agentplane-lib.baseEnv), then what its parts read (server,
     client, redis: agentplane-lib.parts), then the chart's own variables (<chart>.env, in the
     chart's _helpers.tpl), then OpenTelemetry's;
  2. each of those replaced by the variables given by name, when set, and the other given ones
     added: global.env.vars, then global.controllers.env.vars (controller-side charts) or
     global.controlPlane.env.vars (watch-gateway), then env.vars, then the chart's
     controllers.env.vars or controlPlane.env.vars, each over the one before (the seeds' "unless
     overridden via env.vars");
  3. global.extraEnv, then extraEnv (EnvVar objects, valueFrom allowed), each replacing a variable
     of the same name.

A JANGAR_* variable given in 2 or 3 that this service does not read is refused, naming the
services that read it (agentplane-lib.readers, generated from the code), except that a global one
is left out of a service that does not read it. The seeds' values that cannot apply are refused
here, saying why (agentplane-lib.seedChecks).
*/}}
{{- define "agentplane-lib.containerEnv" -}}
{{- $g := .Values.global | default dict }}
{{- $readers := include "agentplane-lib.readers" . | fromYaml }}
{{- $vars := include "agentplane-lib.givenVars" . | fromJson }}
{{- $extra := list }}
{{- range ($g.extraEnv | default list) }}
{{- if include "agentplane-lib.reads" (dict "readers" $readers "chart" $.Chart.Name "name" .name) }}
{{- $extra = append $extra . }}
{{- end }}
{{- end }}
{{- range (.Values.extraEnv | default list) }}
{{- include "agentplane-lib.refuseUnread" (dict "readers" $readers "chart" $.Chart.Name "name" .name "where" "extraEnv") }}
{{- $extra = append $extra . }}
{{- end }}
{{- $extraByName := dict }}
{{- range $extra }}{{ $_ := set $extraByName .name . }}{{ end }}
{{- $env := list }}
{{- $managed := dict }}
{{- $parts := include "agentplane-lib.parts" . | fromJsonArray }}
{{- $partsEnv := list }}
{{- if has "server" $parts }}{{ $partsEnv = concat $partsEnv (include "agentplane-lib.serverEnv" . | fromYamlArray) }}{{ end }}
{{- if has "client" $parts }}{{ $partsEnv = concat $partsEnv (include "agentplane-lib.clientEnv" . | fromYamlArray) }}{{ end }}
{{- if has "redis" $parts }}{{ $partsEnv = concat $partsEnv (include "agentplane-lib.redisEnv" . | fromYamlArray) }}{{ end }}
{{- $chartEnv := include (printf "%s.env" .Chart.Name) . | fromYamlArray }}
{{- range concat (include "agentplane-lib.baseEnv" . | fromYamlArray) $partsEnv $chartEnv (include "agentplane-lib.otelEnv" . | fromYamlArray) }}
{{- $_ := set $managed .name true }}
{{- if hasKey $extraByName .name }}
{{- else if hasKey $vars .name }}
{{- $env = append $env (dict "name" .name "value" (get $vars .name | toString)) }}
{{- else }}
{{- $env = append $env . }}
{{- end }}
{{- end }}
{{- range $name, $value := $vars }}
{{- if and (not (hasKey $managed $name)) (not (hasKey $extraByName $name)) }}
{{- $env = append $env (dict "name" $name "value" ($value | toString)) }}
{{- end }}
{{- end }}
{{- $done := dict }}
{{- range $extra }}
{{- if not (hasKey $done .name) }}
{{- $_ := set $done .name true }}
{{- $env = append $env (get $extraByName .name) }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
givenVars: the variables given by name (step 2 above) that this service gets, as JSON (name to
value): the global ones it reads, then its own (each refused when it does not read it). A chart's
own templates read a setting's effective value here (cancel-propagator's cancel switch).
*/}}
{{- define "agentplane-lib.givenVars" -}}
{{- $g := .Values.global | default dict }}
{{- $sideKey := ternary "controlPlane" "controllers" (hasKey .Values "controlPlane") }}
{{- $globalVars := deepCopy (dig "env" "vars" dict $g) }}
{{- $globalVars = mergeOverwrite $globalVars (deepCopy (dig $sideKey "env" "vars" dict $g)) }}
{{- $ownVars := deepCopy ((.Values.env | default dict).vars | default dict) }}
{{- $ownVars = mergeOverwrite $ownVars (deepCopy (dig "env" "vars" dict (index .Values $sideKey | default dict))) }}
{{- include "agentplane-lib.seedChecks" (dict "Values" .Values "vars" (merge (deepCopy $ownVars) $globalVars) "chart" .Chart.Name) }}
{{- $readers := include "agentplane-lib.readers" . | fromYaml }}
{{- $vars := dict }}
{{- range $name, $value := $globalVars }}
{{- if include "agentplane-lib.reads" (dict "readers" $readers "chart" $.Chart.Name "name" $name) }}
{{- $_ := set $vars $name $value }}
{{- end }}
{{- end }}
{{- range $name, $value := $ownVars }}
{{- include "agentplane-lib.refuseUnread" (dict "readers" $readers "chart" $.Chart.Name "name" $name "where" "env.vars") }}
{{- $_ := set $vars $name $value }}
{{- end }}
{{- toJson $vars }}
{{- end }}

{{/*
What every service reads: its identity (downward API), where it listens, how it logs, where it
acts. JANGAR_GRPC_HOST is 127.0.0.1 where the chart says the service must not be reachable from
other pods (<chart>.bindHost, else auth.mode=none), 0.0.0.0 otherwise.
*/}}
{{- define "agentplane-lib.baseEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: JANGAR_GRPC_HOST
  value: {{ include "agentplane-lib.bindHost" . | quote }}
- name: JANGAR_GRPC_PORT
  value: {{ include "agentplane-lib.grpcPort" . | quote }}
- name: JANGAR_METRICS_ADDR
  value: {{ printf "0.0.0.0:%d" (.Values.metrics.port | int) | quote }}
- name: JANGAR_LOG_LEVEL
  value: {{ include "agentplane-lib.logLevel" . | quote }}
- name: JANGAR_LOG_FORMAT
  value: {{ include "agentplane-lib.logFormat" . | quote }}
- name: JANGAR_AGENTS_CONTROLLER_NAMESPACES
  value: {{ include "agentplane-lib.namespaces" . | fromJsonArray | join "," | quote }}
{{- end }}

{{/*
Where the gRPC server (and watch-gateway's HTTP server) listens: 127.0.0.1 with auth.mode=none
(reachable through kubectl port-forward only), else 0.0.0.0.
*/}}
{{- define "agentplane-lib.bindHost" -}}
{{- if eq ((.Values.auth | default dict).mode | default "") "none" }}127.0.0.1{{ else }}0.0.0.0{{ end }}
{{- end }}

{{- define "agentplane-lib.otelEnv" -}}
- name: OTEL_SERVICE_NAME
  value: {{ .Chart.Name | quote }}
{{- with include "agentplane-lib.otelEndpoint" . }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with include "agentplane-lib.otelProtocol" . }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
reads: (dict "readers" R "chart" C "name" N) "true" when service C reads variable N, or N is not
one of agentplane's own (not JANGAR_*: OTEL_*, GOMAXPROCS, HTTPS_PROXY, ... are read by the
libraries and the Go runtime, which the chart does not know).
*/}}
{{- define "agentplane-lib.reads" -}}
{{- if or (not (hasPrefix "JANGAR_" .name)) (has .chart (get .readers .name | default list)) }}true{{ end }}
{{- end }}

{{/*
refuseUnread: (dict "readers" R "chart" C "name" N "where" W) fails when service C does not read
the JANGAR_* variable N given in W, naming who reads it.
*/}}
{{- define "agentplane-lib.refuseUnread" -}}
{{- if not (include "agentplane-lib.reads" .) }}
{{- $who := get .readers .name | default list }}
{{- if $who }}
{{- fail (printf "%s: %s %s is not read by %s, so it would do nothing here; it is read by %s: set it there (in the agentplane chart: under %s:, or global.env.vars for every service that reads it)" .chart .where .name .chart (join ", " $who) (first $who)) }}
{{- else }}
{{- fail (printf "%s: %s %s is read by no agentplane service, so it would do nothing: check its name (docs/architecture.md and each chart's README list the variables)" .chart .where .name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The seeds' values that agentplane cannot honour, refused with why: grpc.enabled=false (every
service serves gRPC), JANGAR_PRIMITIVES_NAMESPACES (the seeds' supporting-primitives controller,
which agentplane does not have), orchestrationController.* and supportingController.* (where the
chart has them). (dict "Values" .Values "vars" VARS "chart" NAME)
*/}}
{{- define "agentplane-lib.seedChecks" -}}
{{- $v := .Values }}
{{- if and (kindIs "map" $v.grpc) (hasKey $v.grpc "enabled") (not $v.grpc.enabled) }}
{{- fail (printf "%s: grpc.enabled=false cannot apply: agentplane's services always serve gRPC (the controllers write status and events to status-writer and event-emitter over it, and every service answers grpc.health.v1 on it); leave it unset or true" .chart) }}
{{- end }}
{{- if hasKey .vars "JANGAR_PRIMITIVES_NAMESPACES" }}
{{- fail (printf "%s: JANGAR_PRIMITIVES_NAMESPACES does not apply: it places the seeds' supporting-primitives controller, which agentplane does not have; controller.namespaces (JANGAR_AGENTS_CONTROLLER_NAMESPACES) is where every service acts" .chart) }}
{{- end }}
{{- with $v.orchestrationController }}
{{- if and (hasKey . "enabled") (not .enabled) }}
{{- fail (printf "%s: orchestrationController.enabled=false cannot apply: OrchestrationRuns are reconciled by run-controller itself (there is no separate orchestration controller to turn off); to run none, create none, or refuse them with RBAC" $.chart) }}
{{- end }}
{{- if .namespaces }}
{{- fail (printf "%s: orchestrationController.namespaces does not apply: run-controller reconciles OrchestrationRuns where it reconciles AgentRuns, in controller.namespaces; set that instead" $.chart) }}
{{- end }}
{{- end }}
{{- with $v.supportingController }}
{{- if or .enabled .namespaces }}
{{- fail (printf "%s: supportingController.* does not apply: agentplane has no supporting-primitives controller (the seeds' Memory, ImplementationSource and similar kinds are not served); leave it unset or enabled=false" $.chart) }}
{{- end }}
{{- end }}
{{- end }}
