{{/* The shared definitions (name, fullname, labels, ...) are in _common.tpl, generated from
charts/_shared by `make generate`. */}}

{{/*
The container's environment, as a YAML list; containerEnv (_common.tpl) applies env.vars to it.
*/}}
{{- define "run-controller.env" -}}
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
  value: {{ include "run-controller.namespaces" . | fromJsonArray | join "," | quote }}
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
{{- if .Values.leaderElection.enabled }}
{{- $le := .Values.leaderElection }}
{{- $lease := include "run-controller.durationMs" $le.leaseDuration | float64 }}
{{- $renew := include "run-controller.durationMs" $le.renewDeadline | float64 }}
{{- $retry := include "run-controller.durationMs" $le.retryPeriod | float64 }}
{{- if not (and (gt $lease $renew) (gt $renew $retry) (gt $retry 0.0)) }}
{{- fail (printf "leaderElection needs leaseDuration > renewDeadline > retryPeriod > 0 (got %s, %s, %s); run-controller refuses anything else" $le.leaseDuration $le.renewDeadline $le.retryPeriod) }}
{{- end }}
{{- end }}
- name: JANGAR_LEADER_ELECTION_ENABLED
  value: {{ .Values.leaderElection.enabled | quote }}
- name: JANGAR_LEADER_ELECTION_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: JANGAR_LEADER_ELECTION_LEASE_DURATION
  value: {{ .Values.leaderElection.leaseDuration | quote }}
- name: JANGAR_LEADER_ELECTION_RENEW_DEADLINE
  value: {{ .Values.leaderElection.renewDeadline | quote }}
- name: JANGAR_LEADER_ELECTION_RETRY_PERIOD
  value: {{ .Values.leaderElection.retryPeriod | quote }}
- name: JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS
  value: {{ (ternary .Values.controller.jobTtlSecondsAfterFinished .Values.controller.jobTTLSeconds (kindIs "invalid" .Values.controller.jobTTLSeconds)) | int64 | quote }}
- name: JANGAR_AGENT_RUNNER_JOB_FINALIZER_ENABLED
  {{- if not (kindIs "bool" .Values.controller.jobResultFinalizer) }}
  {{- fail "run-controller: set controller.jobResultFinalizer: true when job-gc is installed for the same namespaces (it releases the agents.proompteng.ai/job-result finalizer once a Job's outcome is recorded), false when it is not (nothing else would release it: held Jobs are never removed and block namespace deletion)" }}
  {{- end }}
  value: {{ .Values.controller.jobResultFinalizer | quote }}
- name: JANGAR_AGENTS_CONTROLLER_WORKERS
  value: {{ .Values.controller.workers | int | quote }}
- name: JANGAR_AGENT_IMAGE
  value: {{ .Values.runtime.agentImage | default (printf "%sagentplane/agent:%s" (ternary "" (printf "%s/" .Values.image.registry) (empty .Values.image.registry)) (.Values.image.tag | default .Chart.AppVersion)) | quote }}
{{- range $k, $env := dict "namespace" "NAMESPACE" "agent" "AGENT" "cluster" "CLUSTER" }}
- name: JANGAR_AGENTS_CONTROLLER_CONCURRENCY_{{ $env }}
  value: {{ index $.Values.controller.concurrency $k | int | quote }}
{{- end }}
{{- range $k, $env := dict "namespace" "NAMESPACE" "repo" "REPO" "cluster" "CLUSTER" }}
- name: JANGAR_AGENTS_CONTROLLER_QUEUE_{{ $env }}
  value: {{ index $.Values.controller.queue $k | int | quote }}
- name: JANGAR_AGENTS_CONTROLLER_RATE_{{ $env }}
  value: {{ index $.Values.controller.rate $k | int | quote }}
{{- end }}
- name: JANGAR_AGENTS_CONTROLLER_RATE_WINDOW_SECONDS
  value: {{ .Values.controller.rate.windowSeconds | int | quote }}
{{- range $k, $env := dict "imagesAllowed" "IMAGES_ALLOWED" "imagesDenied" "IMAGES_DENIED" "labelsRequired" "LABELS_REQUIRED" "labelsAllowed" "LABELS_ALLOWED" "labelsDenied" "LABELS_DENIED" "blockedSecrets" "BLOCKED_SECRETS" }}
- name: JANGAR_AGENTS_CONTROLLER_{{ $env }}
  value: {{ index $.Values.controller.admissionPolicy $k | join "," | quote }}
{{- end }}
- name: JANGAR_AGENTS_CONTROLLER_UNRECORDED_RUNS
  value: {{ .Values.controller.admissionPolicy.unrecordedRuns | quote }}
- name: JANGAR_STATUS_WRITER_ADDR
  value: {{ .Values.statusWriter.address | quote }}
- name: JANGAR_EVENT_EMITTER_ADDR
  value: {{ .Values.eventEmitter.address | quote }}
{{- end }}

{{/*
A duration value (the schema's pattern: numbers with ms, s, m or h, as in "1m30s") in milliseconds.
*/}}
{{- define "run-controller.durationMs" -}}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ms|s|m|h)" . -1 }}
{{- $unit := regexFind "(ms|s|m|h)$" . }}
{{- $total = addf $total (mulf (trimSuffix $unit . | float64) (get (dict "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0) $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
What the service may do in each namespace it acts in (a Role per namespace, or one ClusterRole
with rbac.clusterScoped).
*/}}
{{- define "run-controller.rules" -}}
# Watch the desired state (status is written by status-writer, never here).
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agents", "agentruns"]
  verbs: ["list", "watch"]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrations", "orchestrationruns"]
  verbs: ["list", "watch"]
# Start one AgentRun per Orchestration step (get: to confirm one that already exists is ours),
# on the OrchestrationRun's behalf: delegate exempts these from the admission policies' checks of
# the creator (agentplane-crds), as they name nothing but the step's Agent and image.
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns"]
  verbs: ["get", "create", "delegate"]
# The Jobs and step runs it makes name their owner with blockOwnerDeletion; where the
# OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift), that needs update on
# the owner's finalizers subresource (nothing else: the runs themselves stay read-only here).
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns/finalizers"]
  verbs: ["update"]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrationruns/finalizers"]
  verbs: ["update"]
# Run each AgentRun as Jobs (get: to confirm one that already exists is ours). Without job-gc
# (controller.jobResultFinalizer=false), patch too: run-controller then releases the job-result
# holds an earlier install left on the Jobs of finished or deleted runs (nothing else would).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: {{ ternary (list "get" "list" "watch" "create") (list "get" "list" "watch" "create" "patch") (eq (toString .Values.controller.jobResultFinalizer) "true") | toJson }}
# See when a run's pod runs.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Check that the Secrets a run names exist (metadata only: their values are never read).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}

{{/*
The volumes this service mounts besides /tmp, and their mounts (the shared deployment.yaml,
charts/_shared, includes them).
*/}}
{{- define "run-controller.volumeMounts" }}
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

{{- define "run-controller.volumes" }}
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
{{- define "run-controller.alerts" -}}
- alert: AgentplaneReconcileErrors
  expr: "sum by (kind) (rate(agentplane_run_controller_reconcile_errors_total[5m])) > 0.1"
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: "run-controller keeps failing reconciles"
    description: "run-controller has retried failing reconciles for 15 minutes: runs are not progressing."
    runbook_url: {{ printf "%s#agentplanereconcileerrors" .Values.metrics.prometheusRule.runbookBaseURL | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (charts/_shared/dashboard.yaml); .sel is the
scrape job's label selector.
*/}}
{{- define "run-controller.dashboardPanels" -}}
- title: "Runs by phase"
  expr: {{ printf "sum by (phase) (agentplane_run_controller_runs{%s})" .sel | quote }}
  legend: {{ "{{phase}}" | quote }}
  unit: short
- title: "Jobs created/s"
  expr: {{ printf "sum(rate(agentplane_run_controller_jobs_created_total{%s}[5m]))" .sel | quote }}
  legend: {{ "Jobs" | quote }}
  unit: reqps
- title: "Work queue depth"
  expr: {{ printf "max(agentplane_run_controller_queue_depth{%s})" .sel | quote }}
  legend: {{ "depth" | quote }}
  unit: short
- title: "Reconcile p99 by kind"
  expr: {{ printf "histogram_quantile(0.99, sum by (le, kind) (rate(agentplane_run_controller_reconcile_duration_seconds_bucket{%s}[5m])))" .sel | quote }}
  legend: {{ "{{kind}}" | quote }}
  unit: s
- title: "Reconcile errors/s by kind"
  expr: {{ printf "sum by (kind) (rate(agentplane_run_controller_reconcile_errors_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{kind}}" | quote }}
  unit: reqps
- title: "API server requests/s"
  expr: {{ printf "sum(rate(agentplane_run_controller_api_requests_total{%s}[5m]))" .sel | quote }}
  legend: {{ "requests" | quote }}
  unit: reqps
{{- end }}
