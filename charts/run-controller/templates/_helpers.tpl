{{/* The shared definitions (names, labels, the environment, every shared object) are in the
library chart charts/agentplane-lib; these are what is run-controller's own. */}}

{{/* What kind of service it is (agentplane-lib.parts): client. */}}
{{- define "run-controller.parts" -}}client{{- end }}

{{/*
The container's own environment, as a YAML list, after what every service and its parts read
(agentplane-lib.containerEnv, which also applies env.vars).
*/}}
{{- define "run-controller.env" -}}
- name: JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS
  value: {{ (ternary .Values.controller.jobTtlSecondsAfterFinished .Values.controller.jobTTLSeconds (kindIs "invalid" .Values.controller.jobTTLSeconds)) | int64 | quote }}
- name: JANGAR_AGENT_RUNNER_JOB_FINALIZER_ENABLED
  value: {{ include "run-controller.jobResultFinalizer" . | quote }}
- name: JANGAR_AGENTS_CONTROLLER_WORKERS
  value: {{ .Values.controller.workers | int | quote }}
- name: JANGAR_AGENT_IMAGE
  value: {{ include "run-controller.agentImage" . | quote }}
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
{{- end }}

{{/*
Whether run-controller holds its Jobs for job-gc (controller.jobResultFinalizer): the value given;
in the agentplane chart, when none is, true (job-gc is in the release unless left out, which that
chart then refuses without a choice here); else the operator must choose.
*/}}
{{- define "run-controller.jobResultFinalizer" -}}
{{- $v := .Values.controller.jobResultFinalizer }}
{{- if kindIs "bool" $v }}{{ $v }}
{{- else if include "agentplane-lib.inUmbrella" . }}true
{{- else }}
{{- fail "run-controller: set controller.jobResultFinalizer: true when job-gc is installed for the same namespaces (it releases the agents.proompteng.ai/job-result finalizer once a Job's outcome is recorded), false when it is not (nothing else would release it: held Jobs are never removed and block namespace deletion)" }}
{{- end }}
{{- end }}

{{/*
The image of runs that name none (neither the run nor its Agent): runtime.agentImage, else the
project's example agent from the registry of the chart's images, with their tag.
*/}}
{{- define "run-controller.agentImage" -}}
{{- $registry := include "agentplane-lib.registry" . }}
{{- .Values.runtime.agentImage | default (printf "%sagentplane/agent:%s" (ternary (printf "%s/" $registry) "" (ne $registry "")) (.Values.image.tag | default .Chart.AppVersion)) }}
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
  verbs: {{ ternary (list "get" "list" "watch" "create") (list "get" "list" "watch" "create" "patch") (eq (include "run-controller.jobResultFinalizer" .) "true") | toJson }}
# See when a run's pod runs.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Check that the Secrets a run names exist (metadata only: their values are never read).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}

{{/* Its volumes are its parts' (the service token, the backend TLS Secret: agentplane-lib). */}}
{{- define "run-controller.volumeMounts" }}{{ end }}
{{- define "run-controller.volumes" }}{{ end }}

{{/*
This service's own alerts (agentplane-lib.alertRules adds them to its PrometheusRule); .sel is
the release's series selector, .runbook the runbook base URL.
*/}}
{{- define "run-controller.alerts" -}}
- alert: AgentplaneReconcileErrors
  expr: {{ printf "sum by (namespace, job, kind) (rate(agentplane_run_controller_reconcile_errors_total{%s}[5m])) > 0.1" .sel | quote }}
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: "run-controller keeps failing reconciles"
    description: "run-controller has retried failing reconciles for 15 minutes: runs are not progressing."
    runbook_url: {{ printf "%s#agentplanereconcileerrors" .runbook | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (agentplane-lib.dashboardJSON); .sel is the
release's series selector.
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
