{{/* The shared definitions (names, labels, the environment, every shared object) are in the
library chart charts/agentplane-lib; these are what is job-gc's own. */}}

{{/* What kind of service it is (agentplane-lib.parts): client. */}}
{{- define "job-gc.parts" -}}client{{- end }}

{{/*
The container's own environment, as a YAML list, after what every service and its parts read
(agentplane-lib.containerEnv, which also applies env.vars).
*/}}
{{- define "job-gc.env" -}}
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
{{- include "job-gc.archiveEnv" . }}
{{- end }}

{{/*
The run archive's variables, from archive.* only: the chart grants the rights archiving needs
(reading Events, pods and their logs) with archive.enabled, so a JANGAR_ARCHIVE_* variable given
through env.vars or extraEnv, which would turn archiving on without them, is refused.
*/}}
{{- define "job-gc.archiveEnv" -}}
{{- $g := .Values.global | default dict }}
{{- range $name, $_ := include "agentplane-lib.givenVars" . | fromJson }}
{{- if hasPrefix "JANGAR_ARCHIVE_" $name }}
{{- fail (printf "job-gc: %s is set by the archive values (archive.enabled, archive.url, ...), not env.vars: only archive.enabled grants job-gc the rights archiving needs" $name) }}
{{- end }}
{{- end }}
{{- range concat ($g.extraEnv | default list) (.Values.extraEnv | default list) }}
{{- if hasPrefix "JANGAR_ARCHIVE_" .name }}
{{- fail (printf "job-gc: %s is set by the archive values (archive.enabled, archive.url, ...), not extraEnv: only archive.enabled grants job-gc the rights archiving needs" .name) }}
{{- end }}
{{- end }}
{{- include "agentplane-lib.archiveEnv" . }}
{{- $a := .Values.archive }}
{{- if $a.enabled }}
- name: JANGAR_ARCHIVE_LOG_LINES
  value: {{ $a.logLines | int | quote }}
- name: JANGAR_ARCHIVE_RETENTION_SECONDS
  value: {{ $a.retentionSeconds | int64 | quote }}
{{- end }}
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
# event-emitter: no status or events-writing rights here. patch and archive: the run archive's
# finalizer (a JSON patch of metadata.finalizers; the admission policy agentplane-run-metadata
# lets a caller without update change that finalizer and nothing else when it has the verb
# archive), added while archiving is on and released when it is turned off or job-gc is
# uninstalled (so both are granted with archiving off too).
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns"]
  verbs: ["get", "list", "watch", "patch", "archive", "delete"]
# Delete a finished OrchestrationRun (and, above, its step runs and their Jobs) at the end of its
# retention; patch and archive: the archive's finalizer, as above.
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrationruns"]
  verbs: ["get", "list", "watch", "patch", "archive", "delete"]
{{- if .Values.archive.enabled }}
# The run archive captures what goes soon: a finished run's Events (watched: those about
# AgentRuns and OrchestrationRuns, kept in job-gc's cache), its Jobs' pods (list, by job-name)
# and the tails of their logs.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* Its volumes are its parts' (the service token, the backend TLS Secret: agentplane-lib), and
the CA of the archive's database when archive.tls.caSecretRef names one. */}}
{{- define "job-gc.volumeMounts" }}
{{- include "agentplane-lib.archiveVolumeMounts" . }}
{{- end }}
{{- define "job-gc.volumes" }}
{{- include "agentplane-lib.archiveVolumes" . }}
{{- end }}

{{/*
This service's own alerts (agentplane-lib.alertRules adds them to its PrometheusRule); .sel is
the release's series selector, .runbook the runbook base URL.
*/}}
{{- define "job-gc.alerts" -}}
- alert: AgentplaneWorkflowJobMissing
  expr: {{ printf "sum by (namespace, job, run_namespace) (increase(agentplane_job_gc_missing_jobs_total{%s}[15m])) > 0" .sel | quote }}
  for: 0m
  labels:
    severity: warning
  annotations:
    summary: "AgentRuns lost their Job (WorkflowJobMissing)"
    description: "job-gc found AgentRuns whose Job is gone before its outcome was recorded; they fail with WorkflowJobMissing after the grace period."
    runbook_url: {{ printf "%s#agentplaneworkflowjobmissing" .runbook | quote }}
- alert: AgentplaneJobResultHeld
  expr: {{ printf "max by (namespace, job) (agentplane_job_gc_holds_overdue{%s}) > 0" .sel | quote }}
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: "Jobs held by the job-result finalizer past their warning time"
    description: "job-gc keeps finished or deleted Jobs whose outcome their AgentRun has not recorded longer than JANGAR_JOB_GC_HOLD_WARNING_SECONDS; they are not removed (and block namespace deletion) until it is."
    runbook_url: {{ printf "%s#agentplanejobresultheld" .runbook | quote }}
- alert: AgentplaneArchiveBehind
  expr: {{ printf "max by (namespace, job) (agentplane_job_gc_archive_oldest_pending_seconds{%s}) > 900" .sel | quote }}
  for: 5m
  labels:
    severity: warning
  annotations:
    summary: "Finished runs wait for the run archive"
    description: "A finished run has waited more than 15 minutes to be written to the run archive (the database unreachable or refusing); its retention, its deletion by hand and its Jobs' release wait for it: nothing is deleted unarchived."
    runbook_url: {{ printf "%s#agentplanearchivebehind" .runbook | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (agentplane-lib.dashboardJSON); .sel is the
release's series selector.
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
- title: "Runs waiting for the archive"
  expr: {{ printf "max(agentplane_job_gc_archive_pending_runs{%s})" .sel | quote }}
  legend: {{ "pending" | quote }}
  unit: short
- title: "Archive writes/s by result"
  expr: {{ printf "sum by (result) (rate(agentplane_job_gc_archive_writes_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{result}}" | quote }}
  unit: reqps
- title: "Overdue holds"
  expr: {{ printf "max(agentplane_job_gc_holds_overdue{%s})" .sel | quote }}
  legend: {{ "overdue" | quote }}
  unit: short
{{- end }}
