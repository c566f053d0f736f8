{{- /* Generated from charts/_shared/_common.tpl by make generate: edit it there. */}}
{{/*
The chart name, or nameOverride.
*/}}
{{- define "cancel-propagator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: fullnameOverride, else the release name when it already holds the chart
name (`helm install cancel-propagator charts/cancel-propagator` gives "cancel-propagator"), else "<release>-<chart>". Truncated to the 63
characters of a DNS label.
*/}}
{{- define "cancel-propagator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The name of cluster-scoped objects: prefixed with the release namespace, so that releases in two
namespaces do not collide.
*/}}
{{- define "cancel-propagator.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "cancel-propagator.fullname" .) }}
{{- end }}

{{- define "cancel-propagator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "cancel-propagator.labels" -}}
helm.sh/chart: {{ include "cancel-propagator.chart" . }}
{{ include "cancel-propagator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentplane
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The image reference: [registry/]repository, then @digest when set, else :tag (default the chart's
appVersion).
*/}}
{{- define "cancel-propagator.image" -}}
{{- with .Values.image.registry }}{{ . }}/{{ end }}{{ .Values.image.repository }}
{{- if .Values.image.digest }}@{{ .Values.image.digest }}{{ else }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ end }}
{{- end }}

{{/*
Labels that select the pods; they never change across upgrades.
*/}}
{{- define "cancel-propagator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cancel-propagator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cancel-propagator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cancel-propagator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespaces the service acts in, as a JSON list: controller.namespaces, else the release
namespace. Use with fromJsonArray.
*/}}
{{- define "cancel-propagator.namespaces" -}}
{{- .Values.controller.namespaces | default (list .Release.Namespace) | uniq | toJson }}
{{- end }}

{{/*
The container's environment as a YAML list: cancel-propagator.env (each chart's _helpers.tpl), each variable
replaced by env.vars.<NAME> when that is set (the seeds: "unless overridden via env.vars"), then
the other env.vars. The seeds' side overlay wins over env.vars: controllers.env.vars in the
controller-side charts, controlPlane.env.vars in watch-gateway's (whichever the chart has).
The seeds' values that cannot apply are refused here, saying why (cancel-propagator.seedChecks).
*/}}
{{- define "cancel-propagator.containerEnv" -}}
{{- $vars := deepCopy (.Values.env.vars | default dict) }}
{{- $side := dict }}
{{- with .Values.controllers }}{{ $side = dig "env" "vars" dict . | default dict }}{{ end }}
{{- with .Values.controlPlane }}{{ $side = dig "env" "vars" dict . | default dict }}{{ end }}
{{- $vars = mergeOverwrite $vars (deepCopy $side) }}
{{- include "cancel-propagator.seedChecks" (dict "Values" .Values "vars" $vars) }}
{{- $env := list }}
{{- $managed := dict }}
{{- range include "cancel-propagator.env" . | fromYamlArray }}
{{- $_ := set $managed .name true }}
{{- if hasKey $vars .name }}
{{- $env = append $env (dict "name" .name "value" (get $vars .name | toString)) }}
{{- else }}
{{- $env = append $env . }}
{{- end }}
{{- end }}
{{- range $name, $value := $vars }}
{{- if not (hasKey $managed $name) }}
{{- $env = append $env (dict "name" $name "value" ($value | toString)) }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
The Secret holding the server's certificate (tls.crt, tls.key, and ca.crt for helm test), or
nothing when the service serves plaintext: tls.secretName, else <fullname>-tls when the chart
makes it (tls.certManager.issuerRef.name: a cert-manager Certificate; tls.generate: Helm makes a
CA and a certificate at install). Only watch-gateway's values have the last two.
*/}}
{{- define "cancel-propagator.tlsSecretName" -}}
{{- $tls := .Values.tls | default dict -}}
{{- if $tls.secretName -}}
{{- $tls.secretName -}}
{{- else if or (dig "certManager" "issuerRef" "name" "" $tls) $tls.generate -}}
{{- include "cancel-propagator.fullname" . }}-tls
{{- end -}}
{{- end }}

{{/*
The ConfigMap holding the CA clients verify the server with: tls.caConfigMap.name, else
<fullname>-ca when the chart generates the certificate; nothing otherwise. agentctl finds it through
the pod's agentplane.dev/tls-ca-configmap annotation and reads it with the user's kubeconfig.
*/}}
{{- define "cancel-propagator.caConfigMap" -}}
{{- $tls := .Values.tls | default dict -}}
{{- if dig "caConfigMap" "name" "" $tls -}}
{{- dig "caConfigMap" "name" "" $tls -}}
{{- else if and (not $tls.secretName) (not (dig "certManager" "issuerRef" "name" "" $tls)) $tls.generate -}}
{{- include "cancel-propagator.fullname" . }}-ca
{{- end -}}
{{- end }}

{{/*
The pod annotations that tell a client (agentctl, through a port-forward) how to verify the
server: the name in its certificate and where its CA is.
*/}}
{{- define "cancel-propagator.tlsPodAnnotations" -}}
{{- if include "cancel-propagator.tlsSecretName" . }}
agentplane.dev/tls-server-name: {{ printf "%s.%s.svc" (include "cancel-propagator.fullname" .) .Release.Namespace | quote }}
{{- with include "cancel-propagator.caConfigMap" . }}
agentplane.dev/tls-ca-configmap: {{ . | quote }}
agentplane.dev/tls-ca-key: {{ dig "caConfigMap" "key" "ca.crt" ($.Values.tls | default dict) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The seeds' values that agentplane cannot honour, refused with why: grpc.enabled=false (every
service serves gRPC), JANGAR_PRIMITIVES_NAMESPACES (the seeds' supporting-primitives controller,
which agentplane does not have), orchestrationController.* and supportingController.* (where the
chart has them).
*/}}
{{- define "cancel-propagator.seedChecks" -}}
{{- $v := .Values }}
{{- if and (kindIs "map" $v.grpc) (hasKey $v.grpc "enabled") (not $v.grpc.enabled) }}
{{- fail "cancel-propagator: grpc.enabled=false cannot apply: agentplane's services always serve gRPC (the controllers write status and events to status-writer and event-emitter over it, and every service answers grpc.health.v1 on it); leave it unset or true" }}
{{- end }}
{{- if hasKey .vars "JANGAR_PRIMITIVES_NAMESPACES" }}
{{- fail "cancel-propagator: JANGAR_PRIMITIVES_NAMESPACES does not apply: it places the seeds' supporting-primitives controller, which agentplane does not have; controller.namespaces (JANGAR_AGENTS_CONTROLLER_NAMESPACES) is where every service acts" }}
{{- end }}
{{- with $v.orchestrationController }}
{{- if and (hasKey . "enabled") (not .enabled) }}
{{- fail "cancel-propagator: orchestrationController.enabled=false cannot apply: OrchestrationRuns are reconciled by run-controller itself (there is no separate orchestration controller to turn off); to run none, create none, or refuse them with RBAC" }}
{{- end }}
{{- if .namespaces }}
{{- fail "cancel-propagator: orchestrationController.namespaces does not apply: run-controller reconciles OrchestrationRuns where it reconciles AgentRuns, in controller.namespaces; set that instead" }}
{{- end }}
{{- end }}
{{- with $v.supportingController }}
{{- if or .enabled .namespaces }}
{{- fail "cancel-propagator: supportingController.* does not apply: agentplane has no supporting-primitives controller (the seeds' Memory, ImplementationSource and similar kinds are not served); leave it unset or enabled=false" }}
{{- end }}
{{- end }}
{{- end }}
