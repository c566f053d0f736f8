{{/*
Monitoring: the ServiceMonitor, the PrometheusRule and the Grafana dashboard of a service. Their
queries select this release's series only ({job="<fullname>", namespace="<release namespace>"}:
the Prometheus Operator names a Service's scrape job after it), and alerts keep namespace and job,
so that several installs never add up or hide one another.
*/}}

{{/*
The label selector of this release's series.
*/}}
{{- define "agentplane-lib.selector" -}}
{{- printf "job=%q, namespace=%q" (include "agentplane-lib.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "agentplane-lib.servicemonitor" -}}
{{- if .Values.metrics.serviceMonitor.enabled }}
---
# Prometheus Operator: scrape this service's /metrics through its Service's metrics port.
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "agentplane-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
    {{- with .Values.metrics.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "agentplane-lib.selectorLabels" . | nindent 6 }}
  namespaceSelector:
    matchNames: [{{ .Release.Namespace | quote }}]
  endpoints:
    - port: metrics
      path: /metrics
      interval: {{ .Values.metrics.serviceMonitor.interval | quote }}
{{- end }}
{{- end }}

{{/*
The alert rules, as a YAML list: the two every service has (its target down, its target gone),
then the chart's own (<chart>.alerts, given .sel, the selector, and .runbook, the runbook base
URL). Each keeps the namespace and job labels.
*/}}
{{- define "agentplane-lib.alertRules" -}}
{{- $sel := include "agentplane-lib.selector" . }}
{{- $runbook := .Values.metrics.prometheusRule.runbookBaseURL }}
- alert: AgentplaneServiceDown
  expr: {{ printf "up{%s} == 0" $sel | quote }}
  for: 5m
  labels:
    severity: critical
  annotations:
    summary: "{{ .Chart.Name }} in {{ .Release.Namespace }} cannot be scraped"
    description: "Prometheus has not reached {{ .Chart.Name }}'s metrics port for 5 minutes: the pod is down, not ready, or unreachable."
    runbook_url: {{ printf "%s#agentplaneservicedown" $runbook | quote }}
- alert: AgentplaneServiceAbsent
  expr: {{ printf "absent(up{%s})" $sel | quote }}
  for: 10m
  labels:
    severity: critical
  annotations:
    summary: "{{ .Chart.Name }} in {{ .Release.Namespace }} has no scrape target"
    description: "Prometheus has had no target for {{ .Chart.Name }} for 10 minutes: its Service, pods or ServiceMonitor are gone, or the ServiceMonitor is not selected."
    runbook_url: {{ printf "%s#agentplaneserviceabsent" $runbook | quote }}
{{- if has "client" (include "agentplane-lib.parts" . | fromJsonArray) }}
{{- $prefix := printf "agentplane_%s_" (.Chart.Name | replace "-" "_") }}
- alert: AgentplaneWorkQueueBacklog
  expr: {{ printf "max by (namespace, job, kind) (%squeue_depth{%s}) > 100" $prefix $sel | quote }}
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: "{{ .Chart.Name }} in {{ .Release.Namespace }} keeps a backlog of work"
    description: "More than 100 objects have waited in {{ .Chart.Name }}'s work queue for 15 minutes: it reconciles slower than changes arrive (API server slow or refusing, too few workers)."
    runbook_url: {{ printf "%s#agentplaneworkqueuebacklog" $runbook | quote }}
- alert: AgentplaneReconcilePanics
  expr: {{ printf "sum by (namespace, job, kind) (increase(%sreconcile_panics_total{%s}[15m])) > 0" $prefix $sel | quote }}
  for: 0m
  labels:
    severity: critical
  annotations:
    summary: "{{ .Chart.Name }} in {{ .Release.Namespace }} panicked while reconciling"
    description: "A reconcile of {{ .Chart.Name }} panicked (recovered and retried): a bug, with the object's key and stack in its log."
    runbook_url: {{ printf "%s#agentplanereconcilepanics" $runbook | quote }}
{{- end }}
{{ include (printf "%s.alerts" .Chart.Name) (dict "sel" $sel "runbook" $runbook "chart" .Chart.Name "Values" .Values) }}
{{- end }}

{{- define "agentplane-lib.prometheusrule" -}}
{{- if .Values.metrics.prometheusRule.enabled }}
---
# Prometheus Operator: the alerts that matter for this service, each with its runbook
# (docs/runbooks.md). The metrics they read are this service's own, from its first scrape.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "agentplane-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
    {{- with .Values.metrics.prometheusRule.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  groups:
    - name: {{ printf "%s.%s" .Release.Namespace (include "agentplane-lib.fullname" .) }}
      rules:
        {{- include "agentplane-lib.alertRules" . | trim | nindent 8 }}
{{- end }}
{{- end }}

{{/*
The dashboard's uid: unique per release (its namespace and name, hashed) and within Grafana's 40
characters whatever their length.
*/}}
{{- define "agentplane-lib.dashboardUID" -}}
{{- printf "agentplane-%s" (sha256sum (printf "%s/%s" .Release.Namespace (include "agentplane-lib.fullname" .)) | trunc 16) }}
{{- end }}

{{/*
The Grafana dashboard's JSON model: the scrape target, gRPC traffic and latency (every service
serves gRPC), then this service's own series (<chart>.dashboardPanels, given .sel).
*/}}
{{- define "agentplane-lib.dashboardJSON" -}}
{{- $sel := include "agentplane-lib.selector" . }}
{{- $common := list
  (dict "title" "Scrape target up" "expr" (printf "up{%s}" $sel) "legend" "{{pod}}")
  (dict "title" "gRPC requests/s by method and code" "expr" (printf "sum by (grpc_service, grpc_method, grpc_code) (rate(grpc_server_handled_total{%s}[5m]))" $sel) "legend" "{{grpc_service}}/{{grpc_method}} {{grpc_code}}" "unit" "reqps")
  (dict "title" "gRPC p99 latency by method" "expr" (printf "histogram_quantile(0.99, sum by (le, grpc_service, grpc_method) (rate(grpc_server_handling_seconds_bucket{%s}[5m])))" $sel) "legend" "{{grpc_service}}/{{grpc_method}}" "unit" "s")
}}
{{- $panels := list }}
{{- range $i, $p := concat $common (include (printf "%s.dashboardPanels" .Chart.Name) (dict "sel" $sel) | fromYamlArray) }}
{{- $panels = append $panels (dict
  "id" (add1 $i) "type" "timeseries" "title" $p.title
  "gridPos" (dict "h" 8 "w" 12 "x" (mul (mod $i 2) 12) "y" (mul (div $i 2) 8))
  "datasource" (dict "type" "prometheus" "uid" "${datasource}")
  "fieldConfig" (dict "defaults" (dict "unit" ($p.unit | default "short")) "overrides" list)
  "targets" (list (dict "expr" $p.expr "legendFormat" ($p.legend | default "") "refId" "A"))) }}
{{- end }}
{{- $dashboard := dict
  "title" (printf "agentplane / %s (%s, release %s)" .Chart.Name .Release.Namespace .Release.Name)
  "uid" (include "agentplane-lib.dashboardUID" .)
  "tags" (list "agentplane" .Chart.Name)
  "schemaVersion" 39 "editable" true "refresh" "30s"
  "time" (dict "from" "now-6h" "to" "now")
  "templating" (dict "list" (list (dict "name" "datasource" "label" "Prometheus" "type" "datasource" "query" "prometheus")))
  "panels" $panels }}
{{- toJson $dashboard }}
{{- end }}

{{- define "agentplane-lib.dashboard" -}}
{{- if .Values.metrics.grafanaDashboard.enabled }}
{{- $job := include "agentplane-lib.fullname" . }}
---
# A Grafana dashboard for this service, as a ConfigMap that Grafana's dashboard sidecar loads (it
# watches for the label below; kube-prometheus-stack's default is grafana_dashboard: "1").
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $job }}-dashboard
  namespace: {{ .Values.metrics.grafanaDashboard.namespace | default .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
    {{ .Values.metrics.grafanaDashboard.label }}: {{ .Values.metrics.grafanaDashboard.labelValue | quote }}
data:
  {{ printf "agentplane-%s-%s.json" .Release.Namespace $job }}: {{ include "agentplane-lib.dashboardJSON" . | quote }}
{{- end }}
{{- end }}
