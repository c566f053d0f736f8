{{/*
Names, labels and the image of a service chart. Every template here takes the chart's own context
(.): it is rendered by the chart that includes it, with that chart's .Chart and .Values.
*/}}

{{/*
The chart name, or nameOverride.
*/}}
{{- define "agentplane-lib.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: fullnameOverride, else the release name when it already holds the chart
name (`helm install CHART charts/CHART` gives "CHART"), else "<release>-<chart>". Truncated to the 63
characters of a DNS label.
*/}}
{{- define "agentplane-lib.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "agentplane-lib.fullnameOf" (dict "release" .Release.Name "chart" (default .Chart.Name .Values.nameOverride)) }}
{{- end }}
{{- end }}

{{/*
fullnameOf: (dict "release" R "chart" C) the name a chart C of release R gives its objects by
default: how the agentplane chart's services name each other.
*/}}
{{- define "agentplane-lib.fullnameOf" -}}
{{- if contains .chart .release }}
{{- .release | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .release .chart | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The name of cluster-scoped objects: prefixed with the release namespace, so that releases in two
namespaces do not collide.
*/}}
{{- define "agentplane-lib.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "agentplane-lib.fullname" .) }}
{{- end }}

{{- define "agentplane-lib.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "agentplane-lib.labels" -}}
helm.sh/chart: {{ include "agentplane-lib.chart" . }}
{{ include "agentplane-lib.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentplane
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels that select the pods; they never change across upgrades.
*/}}
{{- define "agentplane-lib.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentplane-lib.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The image reference: [registry/]repository, then @digest when set, else :tag (default the chart's
appVersion). The registry is image.registry, else global.imageRegistry.
*/}}
{{- define "agentplane-lib.image" -}}
{{- with include "agentplane-lib.registry" . }}{{ . }}/{{ end }}{{ .Values.image.repository }}
{{- if .Values.image.digest }}@{{ .Values.image.digest }}{{ else }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ end }}
{{- end }}

{{/*
The registry images come from: image.registry, else global.imageRegistry, else none.
*/}}
{{- define "agentplane-lib.registry" -}}
{{- .Values.image.registry | default (include "agentplane-lib.global" (list . "imageRegistry")) }}
{{- end }}

{{/*
The pod's imagePullSecrets, as a YAML list: imagePullSecrets, then global.imagePullSecrets (each
name once).
*/}}
{{- define "agentplane-lib.imagePullSecrets" -}}
{{- $out := list }}
{{- $seen := dict }}
{{- range concat (.Values.imagePullSecrets | default list) ((.Values.global | default dict).imagePullSecrets | default list) }}
{{- $s := ternary (dict "name" .) . (kindIs "string" .) }}
{{- if not (hasKey $seen $s.name) }}
{{- $_ := set $seen $s.name true }}
{{- $out = append $out $s }}
{{- end }}
{{- end }}
{{- if $out }}{{ toYaml $out }}{{ end }}
{{- end }}

{{/*
global: (list . "a" "b" ...) the value of global.a.b..., or "" when it is not set.
*/}}
{{- define "agentplane-lib.global" -}}
{{- $v := (index . 0).Values.global | default dict }}
{{- range rest . }}
{{- if and (kindIs "map" $v) (hasKey $v .) }}
{{- $v = get $v . }}
{{- else }}
{{- $v = "" }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" $v) }}{{ $v }}{{ end }}
{{- end }}

{{- define "agentplane-lib.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentplane-lib.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Scalar settings with a global fallback: the chart's own value, else global.<same>, else the
service's default.
*/}}
{{- define "agentplane-lib.logLevel" -}}
{{- .Values.logLevel | default (include "agentplane-lib.global" (list . "logLevel")) | default "info" }}
{{- end }}

{{- define "agentplane-lib.logFormat" -}}
{{- .Values.logFormat | default (include "agentplane-lib.global" (list . "logFormat")) | default "json" }}
{{- end }}

{{- define "agentplane-lib.otelEndpoint" -}}
{{- .Values.otel.endpoint | default (include "agentplane-lib.global" (list . "otel" "endpoint")) }}
{{- end }}

{{- define "agentplane-lib.otelProtocol" -}}
{{- .Values.otel.protocol | default (include "agentplane-lib.global" (list . "otel" "protocol")) }}
{{- end }}

{{- define "agentplane-lib.priorityClassName" -}}
{{- .Values.priorityClassName | default (include "agentplane-lib.global" (list . "priorityClassName")) }}
{{- end }}

{{/*
The gRPC port: global.grpc.port when set (the agentplane chart wires its services by it), else
grpc.port.
*/}}
{{- define "agentplane-lib.grpcPort" -}}
{{- include "agentplane-lib.global" (list . "grpc" "port") | default .Values.grpc.port | int }}
{{- end }}

{{/*
"true" when the chart is rendered as a subchart of the agentplane chart (its values set
global.agentplane.umbrella).
*/}}
{{- define "agentplane-lib.inUmbrella" -}}
{{- if eq (include "agentplane-lib.global" (list . "agentplane" "umbrella")) "true" }}true{{ end }}
{{- end }}

{{/*
The namespaces the service acts in, as a JSON list (use with fromJsonArray): controller.namespaces;
else global.controller.namespaces; else, in the agentplane chart, its runs namespaces
(agentplane-lib.runsNamespaces); else the release namespace.
*/}}
{{- define "agentplane-lib.namespaces" -}}
{{- $global := dig "controller" "namespaces" list (.Values.global | default dict) }}
{{- if .Values.controller.namespaces }}
{{- .Values.controller.namespaces | uniq | toJson }}
{{- else if $global }}
{{- $global | uniq | toJson }}
{{- else if include "agentplane-lib.inUmbrella" . }}
{{- include "agentplane-lib.runsNamespaces" . }}
{{- else }}
{{- list .Release.Namespace | toJson }}
{{- end }}
{{- end }}

{{/*
runsNamespaces: where the agentplane chart's services act on runs when no namespaces are given, as
a JSON list: on an upgrade, the namespaces this release's run-controller already acts in (its
JANGAR_AGENTS_CONTROLLER_NAMESPACES), so runs in flight stay served; else global.runs.namespace,
or <release namespace>-runs.
*/}}
{{- define "agentplane-lib.runsNamespaces" -}}
{{- $current := "" }}
{{- if .Release.IsUpgrade }}
{{- range (lookup "apps/v1" "Deployment" .Release.Namespace "").items | default list }}
{{- if and (eq (dig "metadata" "labels" "app.kubernetes.io/instance" "" .) $.Release.Name) (eq (dig "metadata" "labels" "app.kubernetes.io/name" "" .) "run-controller") }}
{{- range (index .spec.template.spec.containers 0).env | default list }}
{{- if eq .name "JANGAR_AGENTS_CONTROLLER_NAMESPACES" }}{{ $current = .value | default "" }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if $current }}
{{- splitList "," $current | toJson }}
{{- else }}
{{- list (include "agentplane-lib.global" (list . "runs" "namespace") | default (printf "%s-runs" .Release.Namespace)) | toJson }}
{{- end }}
{{- end }}
