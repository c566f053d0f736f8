{{/* The shared definitions (name, fullname, labels, ...) are in _common.tpl, generated from
charts/_shared by `make generate`. */}}

{{/*
The container's environment, as a YAML list; containerEnv (_common.tpl) applies env.vars to it.
*/}}
{{- define "cancel-propagator.env" -}}
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
  value: "0.0.0.0"
- name: JANGAR_GRPC_PORT
  value: {{ .Values.grpc.port | int | quote }}
- name: JANGAR_METRICS_ADDR
  value: {{ printf "0.0.0.0:%d" (.Values.metrics.port | int) | quote }}
- name: JANGAR_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: JANGAR_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: JANGAR_AGENTS_CONTROLLER_NAMESPACES
  value: {{ include "cancel-propagator.namespaces" . | fromJsonArray | join "," | quote }}
{{- if .Values.serviceToken.enabled }}
- name: JANGAR_SERVICE_TOKEN_FILE
  value: /var/run/secrets/agentplane/token/token
{{- end }}
{{- if .Values.backendTLS.secretName }}
- name: JANGAR_GRPC_CLIENT_CA_FILE
  value: /etc/agentplane/backend-tls/ca.crt
{{- if .Values.backendTLS.clientCertificate }}
- name: JANGAR_GRPC_CLIENT_CERT_FILE
  value: /etc/agentplane/backend-tls/tls.crt
- name: JANGAR_GRPC_CLIENT_KEY_FILE
  value: /etc/agentplane/backend-tls/tls.key
{{- end }}
{{- with .Values.backendTLS.serverName }}
- name: JANGAR_GRPC_CLIENT_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
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
- name: JANGAR_LEADER_ELECTION_ENABLED
  value: {{ .Values.leaderElection.enabled | quote }}
- name: JANGAR_LEADER_ELECTION_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: JANGAR_ORCHESTRATION_CANCEL_ENABLED
  value: {{ .Values.cancel.enabled | quote }}
- name: JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS
  value: {{ .Values.cancel.timeoutMs | int64 | quote }}
- name: JANGAR_CANCEL_PROPAGATOR_WORKERS
  value: {{ .Values.controller.workers | int | quote }}
- name: JANGAR_STATUS_WRITER_ADDR
  value: {{ .Values.statusWriter.address | quote }}
- name: JANGAR_EVENT_EMITTER_ADDR
  value: {{ .Values.eventEmitter.address | quote }}
{{- end }}

{{/*
What the service may do in each namespace it acts in (a Role per namespace, or one ClusterRole
with rbac.clusterScoped).
*/}}
{{- define "cancel-propagator.rules" -}}
# Watch cancelled OrchestrationRuns and AgentRuns (status goes through status-writer, events
# through event-emitter: no status or events rights here).
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrationruns"]
  verbs: ["list", "watch"]
# Set spec.cancel on a cancelled OrchestrationRun's AgentRuns (a merge patch).
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns"]
  verbs: ["list", "watch", "patch"]
# Suspend (patch) and delete a cancelled run's Jobs.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch", "patch", "delete"]
# Delete their pods with their grace period, and confirm none is left.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
# Argo Workflows, when their CRD is served: shut down (patch) and delete a run's Workflows.
- apiGroups: ["argoproj.io"]
  resources: ["workflows"]
  verbs: ["list", "patch", "delete"]
{{- end }}

{{/*
The volumes this service mounts besides /tmp, and their mounts (the shared deployment.yaml,
charts/_shared, includes them).
*/}}
{{- define "cancel-propagator.volumeMounts" }}
            {{- if .Values.serviceToken.enabled }}
            - name: service-token
              mountPath: /var/run/secrets/agentplane/token
              readOnly: true
            {{- end }}
            {{- if .Values.backendTLS.secretName }}
            - name: backend-tls
              mountPath: /etc/agentplane/backend-tls
              readOnly: true
            {{- end }}
{{- end }}

{{- define "cancel-propagator.volumes" }}
        {{- if .Values.serviceToken.enabled }}
        # A token for status-writer and event-emitter only (its audience), rotated by kubelet.
        - name: service-token
          projected:
            sources:
              - serviceAccountToken:
                  path: token
                  audience: {{ .Values.serviceToken.audience | quote }}
                  expirationSeconds: {{ .Values.serviceToken.expirationSeconds | int }}
        {{- end }}
        {{- if .Values.backendTLS.secretName }}
        - name: backend-tls
          secret:
            secretName: {{ .Values.backendTLS.secretName | quote }}
        {{- end }}
{{- end }}

{{/*
This service's own alerts, added to the shared PrometheusRule (charts/_shared/prometheusrule.yaml).
*/}}
{{- define "cancel-propagator.alerts" -}}
- alert: AgentplaneCancelTimedOut
  expr: "sum(increase(agentplane_cancel_propagator_cancels_total{outcome=\"CancelTimedOut\"}[15m])) > 0"
  for: 0m
  labels:
    severity: warning
  annotations:
    summary: "A cancel did not finish within its timeout"
    description: "cancel-propagator gave up waiting for a cancelled run's children to stop (CancelTimedOut): Jobs, pods or Workflows may still be running."
    runbook_url: {{ printf "%s#agentplanecanceltimedout" .Values.metrics.prometheusRule.runbookBaseURL | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (charts/_shared/dashboard.yaml); .sel is the
scrape job's label selector.
*/}}
{{- define "cancel-propagator.dashboardPanels" -}}
- title: "Cancels/s by kind and outcome"
  expr: {{ printf "sum by (kind, outcome) (rate(agentplane_cancel_propagator_cancels_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{kind}} {{outcome}}" | quote }}
  unit: reqps
- title: "Cancel p99 duration"
  expr: {{ printf "histogram_quantile(0.99, sum by (le) (rate(agentplane_cancel_propagator_cancel_seconds_bucket{%s}[5m])))" .sel | quote }}
  legend: {{ "p99" | quote }}
  unit: s
- title: "Children terminated/s"
  expr: {{ printf "sum(rate(agentplane_cancel_propagator_children_terminated_total{%s}[5m]))" .sel | quote }}
  legend: {{ "children" | quote }}
  unit: reqps
{{- end }}
