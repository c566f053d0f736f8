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

{{/* Its volumes are its parts' (the service token, the backend TLS Secret: agentplane-lib). */}}
{{- define "job-gc.volumeMounts" }}{{ end }}
{{- define "job-gc.volumes" }}{{ end }}

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
- title: "Overdue holds"
  expr: {{ printf "max(agentplane_job_gc_holds_overdue{%s})" .sel | quote }}
  legend: {{ "overdue" | quote }}
  unit: short
{{- end }}
