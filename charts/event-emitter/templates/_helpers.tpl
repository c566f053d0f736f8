{{/* The shared definitions (name, fullname, labels, ...) are in _common.tpl, generated from
charts/_shared by `make generate`. */}}

{{/*
The container's environment, as a YAML list; containerEnv (_common.tpl) applies env.vars to it.
*/}}
{{- define "event-emitter.env" -}}
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
  value: {{ include "event-emitter.namespaces" . | fromJsonArray | join "," | quote }}
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
- name: JANGAR_CONTROLLER_EVENTS_ENABLED
  value: {{ .Values.events.enabled | quote }}
- name: JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN
  value: {{ .Values.events.rateLimitPerMin | int64 | quote }}
- name: JANGAR_CONTROLLER_EVENTS_BURST
  value: {{ .Values.events.burst | int64 | quote }}
{{- include "event-emitter.redisEnv" . }}
{{- end }}

{{/*
What the service may do in each namespace it acts in (a Role per namespace, or one ClusterRole
with rbac.clusterScoped).
*/}}
{{- define "event-emitter.rules" -}}
# Record Events: create one, patch its series count when it repeats; never read them back.
# events.k8s.io/v1, and core/v1 where JANGAR_CONTROLLER_EVENTS_API (env.vars) asks for it or the
# API server serves no events.k8s.io/v1.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Read the Secrets an object references only to redact their values from Event messages;
# Secret contents never leave the process. AgentRuns are watched (cut down to the Secrets they
# name) to learn which Secrets a run names, and read directly when the cache misses.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{/*
The volumes this service mounts besides /tmp, and their mounts (the shared deployment.yaml,
charts/_shared, includes them).
*/}}
{{- define "event-emitter.volumeMounts" }}
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
            {{- include "event-emitter.redisVolumeMounts" . }}
{{- end }}

{{- define "event-emitter.volumes" }}
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
        {{- include "event-emitter.redisVolumes" . }}
{{- end }}

{{/*
This service's own alerts, added to the shared PrometheusRule (charts/_shared/prometheusrule.yaml).
*/}}
{{- define "event-emitter.alerts" -}}
- alert: AgentplaneEventEmitterFallback
  expr: "max(agentplane_events_fallback_active) == 1"
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: "event-emitter rate limits in-process (Redis unreachable)"
    description: "event-emitter has not reached Redis for 10 minutes: each replica limits events on its own, so the per-object bound is multiplied by the replica count."
    runbook_url: {{ printf "%s#agentplaneeventemitterfallback" .Values.metrics.prometheusRule.runbookBaseURL | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (charts/_shared/dashboard.yaml); .sel is the
scrape job's label selector.
*/}}
{{- define "event-emitter.dashboardPanels" -}}
- title: "Emit requests/s by outcome"
  expr: {{ printf "sum by (outcome) (rate(agentplane_events_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{outcome}}" | quote }}
  unit: reqps
- title: "Emit requests/s by reason"
  expr: {{ printf "sum by (reason) (rate(agentplane_events_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{reason}}" | quote }}
  unit: reqps
- title: "On the in-process fallback (Redis away)"
  expr: {{ printf "max(agentplane_events_fallback_active{%s})" .sel | quote }}
  legend: {{ "fallback" | quote }}
  unit: short
- title: "API server event writes/s"
  expr: {{ printf "sum by (api, result) (rate(agentplane_events_api_writes_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{api}} {{result}}" | quote }}
  unit: reqps
- title: "Queue drops/s"
  expr: {{ printf "sum(rate(agentplane_events_queue_dropped_total{%s}[5m]))" .sel | quote }}
  legend: {{ "dropped" | quote }}
  unit: reqps
- title: "Redis decision p99"
  expr: {{ printf "histogram_quantile(0.99, sum by (le) (rate(agentplane_events_redis_seconds_bucket{%s}[5m])))" .sel | quote }}
  legend: {{ "p99" | quote }}
  unit: s
{{- end }}
