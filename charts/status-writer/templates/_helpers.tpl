{{/*
The chart name, or nameOverride.
*/}}
{{- define "status-writer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: fullnameOverride, else the release name when it already holds the chart
name (`helm install status-writer charts/status-writer` gives "status-writer"), else "<release>-<chart>". Truncated to the 63
characters of a DNS label.
*/}}
{{- define "status-writer.fullname" -}}
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
{{- define "status-writer.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "status-writer.fullname" .) }}
{{- end }}

{{- define "status-writer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "status-writer.labels" -}}
helm.sh/chart: {{ include "status-writer.chart" . }}
{{ include "status-writer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentplane
{{- end }}

{{/*
Labels that select the pods; they never change across upgrades.
*/}}
{{- define "status-writer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "status-writer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "status-writer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "status-writer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespaces the service acts in, as a JSON list: controller.namespaces, else the release
namespace. Use with fromJsonArray.
*/}}
{{- define "status-writer.namespaces" -}}
{{- .Values.controller.namespaces | default (list .Release.Namespace) | uniq | toJson }}
{{- end }}

{{/*
The container's environment, as a YAML list. deployment.yaml appends env.vars to it.
*/}}
{{- define "status-writer.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: JANGAR_GRPC_HOST
  value: {{ if eq .Values.auth.mode "none" }}"127.0.0.1"{{ else }}"0.0.0.0"{{ end }}
- name: JANGAR_GRPC_PORT
  value: {{ .Values.grpc.port | int | quote }}
- name: JANGAR_METRICS_ADDR
  value: {{ printf "0.0.0.0:%d" (.Values.metrics.port | int) | quote }}
- name: JANGAR_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: JANGAR_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: JANGAR_AGENTS_CONTROLLER_NAMESPACES
  value: {{ include "status-writer.namespaces" . | fromJsonArray | join "," | quote }}
- name: JANGAR_GRPC_AUTH_MODE
  value: {{ .Values.auth.mode | quote }}
{{- if eq .Values.auth.mode "token" }}
- name: JANGAR_GRPC_AUTH_AUDIENCES
  value: {{ join "," .Values.auth.audiences | quote }}
{{- end }}
{{- if ne .Values.auth.mode "none" }}
- name: JANGAR_GRPC_AUTH_ALLOWED_CALLERS
  value: {{ join "," .Values.auth.allowedCallers | quote }}
- name: JANGAR_GRPC_AUTH_CACHE_TTL
  value: {{ .Values.auth.cacheTTL | quote }}
{{- end }}
{{- if .Values.tls.secretName }}
- name: JANGAR_GRPC_TLS_CERT_FILE
  value: /etc/agentplane/tls/tls.crt
- name: JANGAR_GRPC_TLS_KEY_FILE
  value: /etc/agentplane/tls/tls.key
{{- end }}
{{- if eq .Values.auth.mode "mtls" }}
- name: JANGAR_GRPC_TLS_CLIENT_CA_FILE
  value: /etc/agentplane/client-ca/{{ .Values.tls.clientCA.key }}
{{- end }}
- name: OTEL_SERVICE_NAME
  value: {{ .Chart.Name | quote }}
{{- with .Values.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
What the service may do in each namespace it acts in (a Role per namespace, or one ClusterRole
with rbac.clusterScoped).
*/}}
{{- define "status-writer.rules" -}}
# Read the objects whose status this service writes.
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agents", "agentruns"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrations", "orchestrationruns"]
  verbs: ["get", "list", "watch"]
# Write their status subresource only, never their spec.
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agents/status", "agentruns/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrations/status", "orchestrationruns/status"]
  verbs: ["get", "patch", "update"]
{{- end }}
