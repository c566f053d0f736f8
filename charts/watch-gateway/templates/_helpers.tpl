{{/* The shared definitions (names, labels, the environment, every shared object) are in the
library chart charts/agentplane-lib; these are what is watch-gateway's own. */}}

{{/* What kind of service it is (agentplane-lib.parts): redis. */}}
{{- define "watch-gateway.parts" -}}redis{{- end }}

{{/*
The container's own environment, as a YAML list, after what every service and its parts read
(agentplane-lib.containerEnv, which also applies env.vars).
*/}}
{{- define "watch-gateway.env" -}}
- name: JANGAR_HTTP_ADDR
  value: {{ printf "%s:%d" (include "watch-gateway.bindHost" .) (.Values.http.port | int) | quote }}
{{- $svc := include "agentplane-lib.fullname" . }}
- name: JANGAR_HTTP_ALLOWED_HOSTS
  value: {{ concat (list "localhost" $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace)) (include "watch-gateway.servedHosts" . | fromJsonArray) | uniq | join "," | quote }}
- name: JANGAR_WATCH_HEARTBEAT
  value: {{ .Values.heartbeat | quote }}
- name: JANGAR_WATCH_DEBOUNCE
  value: {{ .Values.debounce | quote }}
- name: JANGAR_WATCH_AUTH_MODE
  value: {{ .Values.auth.mode | quote }}
- name: JANGAR_WATCH_AUTH_AUDIENCES
  value: {{ join "," .Values.auth.audiences | quote }}
{{- if include "watch-gateway.apiService" . }}
- name: JANGAR_APISERVICE_ADDR
  value: {{ printf "0.0.0.0:%d" ((.Values.apiService | default dict).port | default 8443 | int) | quote }}
{{- end }}
{{- if include "agentplane-lib.tlsSecretName" . }}
- name: JANGAR_WATCH_TLS_CERT_FILE
  value: /etc/watch-gateway/tls/tls.crt
- name: JANGAR_WATCH_TLS_KEY_FILE
  value: /etc/watch-gateway/tls/tls.key
{{- end }}
{{- if eq .Values.auth.mode "mtls" }}
- name: JANGAR_WATCH_TLS_CLIENT_CA_FILE
  value: /etc/watch-gateway/client-ca/{{ .Values.tls.clientCA.key }}
{{- end }}
- name: JANGAR_CONSOLE_ENABLED
  value: {{ .Values.console.enabled | quote }}
{{- if .Values.console.enabled }}
- name: JANGAR_CONSOLE_CANCEL_ENABLED
  value: {{ .Values.console.cancel | quote }}
- name: JANGAR_CONSOLE_SESSION_TTL
  value: {{ .Values.console.sessionTTL | quote }}
{{- if .Values.console.sessionKey.secretName }}
- name: JANGAR_CONSOLE_SESSION_KEY_FILE
  value: /etc/watch-gateway/console/{{ .Values.console.sessionKey.key }}
{{- end }}
{{- end }}
- name: JANGAR_WATCH_HISTORY_RETENTION
  value: {{ .Values.history.retention | quote }}
- name: JANGAR_WATCH_HISTORY_MAX_ENTRIES
  value: {{ .Values.history.maxEntries | int | quote }}
{{- include "agentplane-lib.archiveEnv" . }}
{{- end }}

{{/*
The host names the gateway is served under besides its Service's: http.allowedHosts, the
Ingress's hosts and the HTTPRoute's hostnames (when enabled), as a JSON list.
*/}}
{{- define "watch-gateway.servedHosts" -}}
{{- $out := .Values.http.allowedHosts | default list }}
{{- if (.Values.ingress | default dict).enabled }}
{{- range .Values.ingress.hosts }}{{ $out = append $out .host }}{{ end }}
{{- end }}
{{- if (.Values.httpRoute | default dict).enabled }}
{{- $out = concat $out (.Values.httpRoute.hostnames | default list) }}
{{- end }}
{{- $out | uniq | toJson }}
{{- end }}

{{/*
What the service may do in each namespace it acts in (a Role per namespace, or one ClusterRole
with rbac.clusterScoped).
*/}}
{{/*
The namespace whose runs the console and the runs stream show: the first of controller.namespaces
(else the release namespace). The control plane's own namespace, whose workloads the status
stream reports on, is always the release namespace.
*/}}
{{- define "watch-gateway.runsNamespace" -}}
{{- include "agentplane-lib.namespaces" . | fromJsonArray | first }}
{{- end }}

{{- define "watch-gateway.lsarRule" -}}
{{- if or (eq .Values.auth.mode "token") (and .Values.console.enabled .Values.console.cancel (eq .Values.auth.mode "mtls")) (include "watch-gateway.apiService" .) }}
# auth.mode=token or apiService.enabled: ask whether a caller may read controlplane/status (and,
# for the console and the runs stream, the runs) in this namespace; mtls with the console's
# Cancel: whether the certificate's user may patch.
- apiGroups: ["authorization.k8s.io"]
  resources: ["localsubjectaccessreviews"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* "true" when the aggregated API is served (apiService.enabled; read with dig for --reuse-values
from a chart without it). */}}
{{- define "watch-gateway.apiService" -}}
{{- if (.Values.apiService | default dict).enabled }}true{{ end }}
{{- end }}

{{/*
The APIService of the aggregated API (dict: root, caBundle base64 PEM or "", annotations): which
Service port the API server dials, and the CA it verifies the gateway's certificate with.
*/}}
{{- define "watch-gateway.apiServiceObject" -}}
{{- $root := .root -}}
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1alpha1.gateway.agents.proompteng.ai
  labels:
    {{- include "agentplane-lib.labels" $root | nindent 4 }}
  {{- with .annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  group: gateway.agents.proompteng.ai
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
  service:
    namespace: {{ $root.Release.Namespace }}
    name: {{ include "agentplane-lib.fullname" $root }}
    port: {{ ($root.Values.apiService | default dict).port | default 8443 | int }}
{{- end }}

{{- define "watch-gateway.healthRules" -}}
# Read-only: report the health of the control plane's own workloads (informers: list and watch).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end }}

{{- define "watch-gateway.consoleRules" -}}
{{- if .Values.console.enabled }}
# The console: the runs stream's informers and a run's page (its Orchestration, Jobs and Events);
# with console.cancel, setting spec.cancel for a user the API server allows to patch the run.
- apiGroups: ["agents.proompteng.ai"]
  resources: ["agentruns"]
  verbs: ["list", "watch"{{ if .Values.console.cancel }}, "patch"{{ end }}]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrationruns"]
  verbs: ["list", "watch"{{ if .Values.console.cancel }}, "patch"{{ end }}]
- apiGroups: ["orchestration.proompteng.ai"]
  resources: ["orchestrations"]
  verbs: ["get"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["list"]
{{- end }}
{{- end }}

{{/*
The rules of the gateway's Role where the control plane and the runs share a namespace (and of its
ClusterRole with rbac.clusterScoped); apart, the Role in the release namespace has
watch-gateway.controlPlaneRules and the one in the runs namespace watch-gateway.runsRules.
*/}}
{{- define "watch-gateway.rules" -}}
{{ include "watch-gateway.healthRules" . }}
{{- include "watch-gateway.lsarRule" . }}
{{- include "watch-gateway.consoleRules" . }}
{{- end }}

{{- define "watch-gateway.controlPlaneRules" -}}
{{ include "watch-gateway.healthRules" . }}
{{- include "watch-gateway.lsarRule" . }}
{{- end }}

{{- define "watch-gateway.runsRules" -}}
{{- include "watch-gateway.lsarRule" . }}
{{- include "watch-gateway.consoleRules" . }}
{{- end }}

{{/*
Where the streams listen: every interface when they are protected (auth.mode token or mtls),
else loopback only (reach them with kubectl port-forward, which connects to the pod's loopback).
*/}}
{{- define "watch-gateway.bindHost" -}}
{{- if eq .Values.auth.mode "none" -}}127.0.0.1{{- else -}}0.0.0.0{{- end -}}
{{- end }}

{{/*
The volumes this service mounts besides /tmp, and their mounts (the shared deployment.yaml,
charts/_shared, includes them).
*/}}
{{- define "watch-gateway.volumeMounts" }}
            {{- if include "agentplane-lib.tlsSecretName" . }}
            - name: tls
              mountPath: /etc/watch-gateway/tls
              readOnly: true
            {{- end }}
            {{- if eq .Values.auth.mode "mtls" }}
            - name: client-ca
              mountPath: /etc/watch-gateway/client-ca
              readOnly: true
            {{- end }}
            {{- if and .Values.console.enabled .Values.console.sessionKey.secretName }}
            - name: console-session
              mountPath: /etc/watch-gateway/console
              readOnly: true
            {{- end }}
{{- include "agentplane-lib.archiveVolumeMounts" . }}
{{- end }}

{{- define "watch-gateway.volumes" }}
        {{- if include "agentplane-lib.tlsSecretName" . }}
        - name: tls
          secret:
            secretName: {{ include "agentplane-lib.tlsSecretName" . | quote }}
        {{- end }}
        {{- if eq .Values.auth.mode "mtls" }}
        {{- if not (and (include "agentplane-lib.tlsSecretName" .) .Values.tls.clientCA.secretName) }}
        {{- fail "auth.mode=mtls needs a server certificate (tls.secretName, tls.certManager.issuerRef.name or tls.generate) and tls.clientCA.secretName (the CA of client certificates)" }}
        {{- end }}
        - name: client-ca
          secret:
            secretName: {{ .Values.tls.clientCA.secretName | quote }}
        {{- end }}
        {{- if and .Values.console.enabled .Values.console.sessionKey.secretName }}
        - name: console-session
          secret:
            secretName: {{ .Values.console.sessionKey.secretName | quote }}
            items:
              - key: {{ .Values.console.sessionKey.key | quote }}
                path: {{ .Values.console.sessionKey.key | quote }}
        {{- end }}
{{- include "agentplane-lib.archiveVolumes" . }}
{{- end }}

{{/*
This service's own alerts (agentplane-lib.alertRules adds them to its PrometheusRule); .sel is
the release's series selector, .runbook the runbook base URL.
*/}}
{{- define "watch-gateway.alerts" -}}
- alert: AgentplaneWatchStreamErrors
  expr: {{ printf "sum by (namespace, job) (rate(agentplane_watch_stream_errors_total{%s}[5m])) > 1" .sel | quote }}
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: "Status watches keep ending in errors"
    description: "watch-gateway has ended more than one status watch per second with an error for 10 minutes: clients reconnect in a loop."
    runbook_url: {{ printf "%s#agentplanewatchstreamerrors" .runbook | quote }}
{{- end }}

{{/*
This service's own panels in its Grafana dashboard (agentplane-lib.dashboardJSON); .sel is the
release's series selector.
*/}}
{{- define "watch-gateway.dashboardPanels" -}}
- title: "Open status watches by transport"
  expr: {{ printf "sum by (transport) (agentplane_watch_active_streams{%s})" .sel | quote }}
  legend: {{ "{{transport}}" | quote }}
  unit: short
- title: "Stream errors/s by reason"
  expr: {{ printf "sum by (transport, reason) (rate(agentplane_watch_stream_errors_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{transport}} {{reason}}" | quote }}
  unit: reqps
- title: "Access refused/s by reason"
  expr: {{ printf "sum by (transport, reason) (rate(agentplane_watch_access_denied_total{%s}[5m]))" .sel | quote }}
  legend: {{ "{{transport}} {{reason}}" | quote }}
  unit: reqps
- title: "Delta dispatch p99"
  expr: {{ printf "histogram_quantile(0.99, sum by (le) (rate(agentplane_watch_delta_dispatch_seconds_bucket{%s}[5m])))" .sel | quote }}
  legend: {{ "p99" | quote }}
  unit: s
{{- end }}
