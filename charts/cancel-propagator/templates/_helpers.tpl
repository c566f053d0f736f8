{{/* The shared definitions (names, labels, the environment, every shared object) are in the
library chart charts/agentplane-lib; these are what is cancel-propagator's own. */}}

{{/* What kind of service it is (agentplane-lib.parts): client. */}}
{{- define "cancel-propagator.parts" -}}client{{- end }}

{{/*
The container's own environment, as a YAML list, after what every service and its parts read
(agentplane-lib.containerEnv, which also applies env.vars).
*/}}
{{- define "cancel-propagator.env" -}}
- name: JANGAR_ORCHESTRATION_CANCEL_ENABLED
  value: {{ .Values.cancel.enabled | quote }}
- name: JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS
  value: {{ .Values.cancel.timeoutMs | int64 | quote }}
- name: JANGAR_CANCEL_PROPAGATOR_WORKERS
  value: {{ .Values.controller.workers | int | quote }}
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
# Delete a cancelled run's Jobs.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch", "delete"]
# Delete their pods with their grace period, and confirm none is left.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
# Argo Workflows, when their CRD is served: shut down (patch) and delete a run's Workflows.
- apiGroups: ["argoproj.io"]
  resources: ["workflows"]
  verbs: ["list", "patch", "delete"]
{{- end }}

{{/* Its volumes are its parts' (the service token, the backend TLS Secret: agentplane-lib). */}}
{{- define "cancel-propagator.volumeMounts" }}{{ end }}
{{- define "cancel-propagator.volumes" }}{{ end }}

{{/*
This service's own alerts (agentplane-lib.alertRules adds them to its PrometheusRule); .sel is
the release's series selector, .runbook the runbook base URL.
*/}}
{{- define "cancel-propagator.alerts" -}}
- alert: AgentplaneCancelTimedOut
  expr: {{ printf "sum by (namespace, job) (increase(agentplane_cancel_propagator_cancels_total{%s, outcome=\"CancelTimedOut\"}[15m])) > 0" .sel | quote }}
  for: 0m
  labels:
    severity: warning
  annotations:
    summary: "A cancel did not finish within its timeout"
    description: "cancel-propagator gave up waiting for a cancelled run's children to stop (CancelTimedOut): Jobs, pods or Workflows may still be running."
    runbook_url: {{ printf "%s#agentplanecanceltimedout" .runbook | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (agentplane-lib.dashboardJSON); .sel is the
release's series selector.
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
