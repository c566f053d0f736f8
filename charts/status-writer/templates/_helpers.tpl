{{/* The shared definitions (name, fullname, labels, ...) are in _common.tpl, generated from
charts/_shared by `make generate`. */}}

{{/*
The container's environment, as a YAML list; containerEnv (_common.tpl) applies env.vars to it.
*/}}
{{- define "status-writer.env" -}}
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
{{- with .Values.otel.protocol }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
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
# Write their status subresource only, never their spec: an update of the object read above
# (the write carries its resourceVersion, so a concurrent change is a conflict, never lost).
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agents/status", "agentruns/status"]
  verbs: ["update"]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrations/status", "orchestrationruns/status"]
  verbs: ["update"]
{{- end }}

{{/*
The volumes this service mounts besides /tmp, and their mounts (the shared deployment.yaml,
charts/_shared, includes them).
*/}}
{{- define "status-writer.volumeMounts" }}
            {{- if .Values.tls.secretName }}
            - name: tls
              mountPath: /etc/agentplane/tls
              readOnly: true
            {{- end }}
            {{- if eq .Values.auth.mode "mtls" }}
            - name: client-ca
              mountPath: /etc/agentplane/client-ca
              readOnly: true
            {{- end }}
{{- end }}

{{- define "status-writer.volumes" }}
        {{- if .Values.tls.secretName }}
        - name: tls
          secret:
            secretName: {{ .Values.tls.secretName | quote }}
        {{- end }}
        {{- if eq .Values.auth.mode "mtls" }}
        {{- if not (and .Values.tls.secretName .Values.tls.clientCA.secretName) }}
        {{- fail "auth.mode=mtls needs tls.secretName (the server certificate) and tls.clientCA.secretName (the CA of client certificates)" }}
        {{- end }}
        - name: client-ca
          secret:
            secretName: {{ .Values.tls.clientCA.secretName | quote }}
        {{- end }}
{{- end }}

{{/*
This service's own alerts, added to the shared PrometheusRule (charts/_shared/prometheusrule.yaml).
*/}}
{{- define "status-writer.alerts" -}}
- alert: AgentplaneStatusWriteErrors
  expr: "sum(rate(agentplane_status_writes_total{outcome=\"error\"}[5m])) > 0"
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: "status-writer fails status writes"
    description: "status-writer answered status writes with an error for 10 minutes: the API server refuses or times out its patches; runs' statuses lag."
    runbook_url: {{ printf "%s#agentplanestatuswriteerrors" .Values.metrics.prometheusRule.runbookBaseURL | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (charts/_shared/dashboard.yaml); .sel is the
scrape job's label selector.
*/}}
{{- define "status-writer.dashboardPanels" -}}
- title: "Status writes/s by kind and outcome"
  expr: {{ printf "sum by (kind, outcome) (rate(agentplane_status_writes_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{kind}} {{outcome}}" | quote }}
  unit: reqps
- title: "API server writes/s (after coalescing)"
  expr: {{ printf "sum(rate(agentplane_status_api_writes_total{%s}[5m]))" .sel | quote }}
  legend: {{ "API writes" | quote }}
  unit: reqps
- title: "Requests coalesced/s"
  expr: {{ printf "sum(rate(agentplane_status_coalesced_requests_total{%s}[5m]))" .sel | quote }}
  legend: {{ "coalesced" | quote }}
  unit: reqps
- title: "Write conflicts/s"
  expr: {{ printf "sum by (kind) (rate(agentplane_status_write_conflicts_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{kind}}" | quote }}
  unit: reqps
- title: "Write p99 latency by kind"
  expr: {{ printf "histogram_quantile(0.99, sum by (le, kind) (rate(agentplane_status_write_duration_seconds_bucket{%s}[5m])))" .sel | quote }}
  legend: {{ "{{kind}}" | quote }}
  unit: s
{{- end }}
