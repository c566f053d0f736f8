{{/* The shared definitions (name, fullname, labels, ...) are in _common.tpl, generated from
charts/_shared by `make generate`. */}}

{{/*
The container's environment, as a YAML list; containerEnv (_common.tpl) applies env.vars to it.
*/}}
{{- define "job-gc.env" -}}
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
  value: {{ include "job-gc.namespaces" . | fromJsonArray | join "," | quote }}
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
- name: JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS
  value: {{ .Values.controller.agentRunRetentionSeconds | int64 | quote }}
- name: JANGAR_AGENTS_CONTROLLER_ORCHESTRATIONRUN_RETENTION_SECONDS
  value: {{ .Values.controller.orchestrationRunRetentionSeconds | int64 | quote }}
- name: JANGAR_JOB_GC_MISSING_JOB_GRACE_SECONDS
  value: {{ .Values.controller.missingJobGraceSeconds | int64 | quote }}
- name: JANGAR_JOB_GC_HOLD_WARNING_SECONDS
  value: {{ .Values.controller.holdWarningSeconds | int64 | quote }}
- name: JANGAR_JOB_GC_WORKERS
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
{{- define "job-gc.rules" -}}
# Watch run-controller's Jobs, release their job-result finalizer (a JSON patch), confirm a Job
# is gone (get), and delete a finished run's Jobs at the end of its retention.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
# Read whether a Job's AgentRun has recorded its outcome (get: confirm a run is gone), and delete
# a finished run at the end of its retention. Status goes through status-writer, events through
# event-emitter: no status or events rights here.
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns"]
  verbs: ["get", "list", "watch", "delete"]
# Delete a finished OrchestrationRun (and, above, its step runs and their Jobs) at the end of its
# retention.
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrationruns"]
  verbs: ["list", "watch", "delete"]
{{- end }}

{{/*
The volumes this service mounts besides /tmp, and their mounts (the shared deployment.yaml,
charts/_shared, includes them).
*/}}
{{- define "job-gc.volumeMounts" }}
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

{{- define "job-gc.volumes" }}
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
{{- define "job-gc.alerts" -}}
- alert: AgentplaneWorkflowJobMissing
  expr: "sum by (namespace) (increase(agentplane_job_gc_missing_jobs_total[15m])) > 0"
  for: 0m
  labels:
    severity: warning
  annotations:
    summary: "AgentRuns lost their Job (WorkflowJobMissing)"
    description: "job-gc found AgentRuns whose Job is gone before its outcome was recorded; they fail with WorkflowJobMissing after the grace period."
    runbook_url: {{ printf "%s#agentplaneworkflowjobmissing" .Values.metrics.prometheusRule.runbookBaseURL | quote }}
- alert: AgentplaneJobResultHeld
  expr: "max(agentplane_job_gc_holds_overdue) > 0"
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: "Jobs held by the job-result finalizer past their warning time"
    description: "job-gc keeps finished or deleted Jobs whose outcome their AgentRun has not recorded longer than JANGAR_JOB_GC_HOLD_WARNING_SECONDS; they are not removed (and block namespace deletion) until it is."
    runbook_url: {{ printf "%s#agentplanejobresultheld" .Values.metrics.prometheusRule.runbookBaseURL | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (charts/_shared/dashboard.yaml); .sel is the
scrape job's label selector.
*/}}
{{- define "job-gc.dashboardPanels" -}}
- title: "Holds released/s by why"
  expr: {{ printf "sum by (why) (rate(agentplane_job_gc_holds_released_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{why}}" | quote }}
  unit: reqps
- title: "Runs missing their Job (last hour)"
  expr: {{ printf "sum(increase(agentplane_job_gc_missing_jobs_total{%s}[1h]))" .sel | quote }}
  legend: {{ "missing" | quote }}
  unit: short
- title: "Runs failed WorkflowJobMissing (last hour)"
  expr: {{ printf "sum(increase(agentplane_job_gc_missing_job_failures_total{%s}[1h]))" .sel | quote }}
  legend: {{ "failed" | quote }}
  unit: short
- title: "Deletions/s by kind"
  expr: {{ printf "sum by (kind) (rate(agentplane_job_gc_deletions_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{kind}}" | quote }}
  unit: reqps
- title: "Overdue holds"
  expr: {{ printf "max(agentplane_job_gc_holds_overdue{%s})" .sel | quote }}
  legend: {{ "overdue" | quote }}
  unit: short
{{- end }}
