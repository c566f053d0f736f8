{{/*
RBAC shapes. Every grant binds the chart's ServiceAccount.

role: (dict "ctx" . "name" NAME "namespace" NS "rules" RULES) a Role with RULES (a YAML list)
and its RoleBinding.
*/}}
{{- define "agentplane-lib.role" -}}
{{- $c := .ctx }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "agentplane-lib.labels" $c | nindent 4 }}
rules:
  {{- .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "agentplane-lib.labels" $c | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "agentplane-lib.serviceAccountName" $c }}
    namespace: {{ $c.Release.Namespace }}
{{- end }}

{{/*
clusterRole: (dict "ctx" . "name" NAME "rules" RULES) a ClusterRole and its ClusterRoleBinding.
*/}}
{{- define "agentplane-lib.clusterRole" -}}
{{- $c := .ctx }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}
  labels:
    {{- include "agentplane-lib.labels" $c | nindent 4 }}
rules:
  {{- .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "agentplane-lib.labels" $c | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "agentplane-lib.serviceAccountName" $c }}
    namespace: {{ $c.Release.Namespace }}
{{- end }}

{{/*
rbac: what the service may do where it acts (<chart>.rules): a Role and RoleBinding in each
namespace of agentplane-lib.namespaces, or one ClusterRole with rbac.clusterScoped; then leader
election's Lease rights ("client" charts) and the TokenReview right ("server" charts).
*/}}
{{- define "agentplane-lib.rbac" -}}
{{- if .Values.rbac.create }}
{{- $rules := include (printf "%s.rules" .Chart.Name) . }}
{{- if .Values.rbac.clusterScoped }}
{{ include "agentplane-lib.clusterRole" (dict "ctx" . "name" (include "agentplane-lib.clusterName" .) "rules" $rules) }}
{{- else }}
{{- range $namespace := include "agentplane-lib.namespaces" . | fromJsonArray }}
{{ include "agentplane-lib.role" (dict "ctx" $ "name" (include "agentplane-lib.fullname" $) "namespace" $namespace "rules" $rules) }}
{{- end }}
{{- end }}
{{- $parts := include "agentplane-lib.parts" . | fromJsonArray }}
{{- if has "client" $parts }}
{{ include "agentplane-lib.leaderElectionRBAC" . }}
{{- end }}
{{- if has "server" $parts }}
{{ include "agentplane-lib.tokenReviewerRBAC" . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
parts: what kind of service the chart is, as a JSON list (its <chart>.parts): "client" (calls
status-writer and event-emitter, elects a leader), "server" (called by the controllers), "redis".
*/}}
{{- define "agentplane-lib.parts" -}}
{{- splitList " " (include (printf "%s.parts" .Chart.Name) . | trim) | compact | toJson }}
{{- end }}
