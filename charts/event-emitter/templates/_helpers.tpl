{{/* The shared definitions (names, labels, the environment, every shared object) are in the
library chart charts/agentplane-lib; these are what is event-emitter's own. */}}

{{/* What kind of service it is (agentplane-lib.parts): server redis. */}}
{{- define "event-emitter.parts" -}}server redis{{- end }}

{{/*
The container's own environment, as a YAML list, after what every service and its parts read
(agentplane-lib.containerEnv, which also applies env.vars).
*/}}
{{- define "event-emitter.env" -}}
- name: JANGAR_CONTROLLER_EVENTS_ENABLED
  value: {{ .Values.events.enabled | quote }}
- name: JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN
  value: {{ .Values.events.rateLimitPerMin | int64 | quote }}
- name: JANGAR_CONTROLLER_EVENTS_BURST
  value: {{ .Values.events.burst | int64 | quote }}
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

{{/* Its volumes are its parts' (the server's certificate and client CA, Redis's CA: agentplane-lib). */}}
{{- define "event-emitter.volumeMounts" }}{{ end }}
{{- define "event-emitter.volumes" }}{{ end }}

{{/*
This service's own alerts (agentplane-lib.alertRules adds them to its PrometheusRule); .sel is
the release's series selector, .runbook the runbook base URL.
*/}}
{{- define "event-emitter.alerts" -}}
- alert: AgentplaneEventEmitterFallback
  expr: {{ printf "max by (namespace, job) (agentplane_events_fallback_active{%s}) == 1" .sel | quote }}
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: "event-emitter rate limits in-process (Redis unreachable)"
    description: "event-emitter has not reached Redis for 10 minutes: each replica limits events on its own, so the per-object bound is multiplied by the replica count."
    runbook_url: {{ printf "%s#agentplaneeventemitterfallback" .runbook | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (agentplane-lib.dashboardJSON); .sel is the
release's series selector.
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
