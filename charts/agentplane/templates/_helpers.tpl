{{/*
enabled: (list . SERVICE) "true" when the subchart SERVICE is installed: its enabled when set;
for the three controllers, else global.controllers.enabled when set; else yes (the conditions in
Chart.yaml, read the same way Helm reads them).
*/}}
{{- define "agentplane.enabled" -}}
{{- $root := index . 0 }}
{{- $svc := index . 1 }}
{{- $own := index $root.Values $svc | default dict }}
{{- $group := dig "controllers" "enabled" nil ($root.Values.global | default dict) }}
{{- if kindIs "bool" $own.enabled }}
{{- if $own.enabled }}true{{ end }}
{{- else if and (has $svc (list "job-gc" "cancel-propagator" "run-controller")) (kindIs "bool" $group) }}
{{- if $group }}true{{ end }}
{{- else }}true{{ end }}
{{- end }}

{{- define "agentplane.services" -}}
status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway
{{- end }}

{{/*
runsNamespaces: where the services act on runs, as a JSON list: global.controller.namespaces,
else the library's (the release's current ones on an upgrade, else global.runs.namespace or
<release namespace>-runs).
*/}}
{{- define "agentplane.runsNamespaces" -}}
{{- with dig "controller" "namespaces" list (.Values.global | default dict) }}
{{- . | uniq | toJson }}
{{- else }}
{{- include "agentplane-lib.runsNamespaces" . }}
{{- end }}
{{- end }}

{{/*
runsNamespace: the one namespace the chart creates for runs, or nothing (global.controller.namespaces
given, an upgrade that keeps the release's namespaces, or global.runs.createNamespace false).
*/}}
{{- define "agentplane.runsNamespace" -}}
{{- $ns := include "agentplane.runsNamespaces" . | fromJsonArray }}
{{- $runs := dig "runs" dict (.Values.global | default dict) }}
{{- $fresh := list ($runs.namespace | default (printf "%s-runs" .Release.Namespace)) }}
{{- if and $runs.createNamespace (not (dig "controller" "namespaces" list (.Values.global | default dict))) (eq (toJson $ns) (toJson $fresh)) (ne (first $ns) .Release.Namespace) }}
{{- first $ns }}
{{- end }}
{{- end }}
