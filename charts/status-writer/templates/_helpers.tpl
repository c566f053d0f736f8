{{/* The shared definitions (names, labels, the environment, every shared object) are in the
library chart charts/agentplane-lib; these are what is status-writer's own. */}}

{{/* What kind of service it is: called by the controllers (agentplane-lib.parts). */}}
{{- define "status-writer.parts" -}}server{{- end }}

{{/*
The container's own environment, as a YAML list, after what every service and every server reads
(agentplane-lib.containerEnv): none.
*/}}
{{- define "status-writer.env" -}}
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

{{/* Its volumes are its parts' (the server's certificate and client CA: agentplane-lib). */}}
{{- define "status-writer.volumeMounts" }}{{ end }}
{{- define "status-writer.volumes" }}{{ end }}

{{/*
This service's own alerts (agentplane-lib.alertRules adds them to its PrometheusRule); .sel is
the release's series selector, .runbook the runbook base URL.
*/}}
{{- define "status-writer.alerts" -}}
- alert: AgentplaneStatusWriteErrors
  expr: {{ printf "sum by (namespace, job) (rate(agentplane_status_writes_total{%s, outcome=\"error\"}[5m])) > 0" .sel | quote }}
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: "status-writer fails status writes"
    description: "status-writer answered status writes with an error for 10 minutes: the API server refuses or times out its patches; runs' statuses lag."
    runbook_url: {{ printf "%s#agentplanestatuswriteerrors" .runbook | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (agentplane-lib.dashboardJSON); .sel is the
release's series selector.
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
