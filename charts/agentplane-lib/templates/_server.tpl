{{/*
The servers the controllers call (status-writer, event-emitter: charts whose <chart>.parts says
"server"): who may call them (auth.*) and their certificate (tls.*).
*/}}

{{/*
auth.allowedCallers as a list: the given ones; when empty, in the agentplane chart (which leaves
it empty), the ServiceAccounts of this release's three controllers.
*/}}
{{- define "agentplane-lib.allowedCallers" -}}
{{- if .Values.auth.allowedCallers }}
{{- toJson .Values.auth.allowedCallers }}
{{- else if include "agentplane-lib.inUmbrella" . }}
{{- $out := list }}
{{- range list "job-gc" "cancel-propagator" "run-controller" }}
{{- $out = append $out (include "agentplane-lib.fullnameOf" (dict "release" $.Release.Name "chart" .)) }}
{{- end }}
{{- toJson $out }}
{{- else }}
{{- fail (printf "%s: auth.allowedCallers is empty: name the ServiceAccounts that may call it (the controllers' charts' defaults are run-controller, job-gc, cancel-propagator)" .Chart.Name) }}
{{- end }}
{{- end }}

{{- define "agentplane-lib.serverEnv" -}}
- name: JANGAR_GRPC_AUTH_MODE
  value: {{ .Values.auth.mode | quote }}
{{- if eq .Values.auth.mode "token" }}
- name: JANGAR_GRPC_AUTH_AUDIENCES
  value: {{ join "," .Values.auth.audiences | quote }}
{{- end }}
{{- if ne .Values.auth.mode "none" }}
- name: JANGAR_GRPC_AUTH_ALLOWED_CALLERS
  value: {{ include "agentplane-lib.allowedCallers" . | fromJsonArray | join "," | quote }}
- name: JANGAR_GRPC_AUTH_CACHE_TTL
  value: {{ .Values.auth.cacheTTL | quote }}
{{- end }}
{{- if .Values.tls.secretName }}
- name: JANGAR_GRPC_TLS_CERT_FILE
  value: /etc/agentplane/tls/tls.crt
- name: JANGAR_GRPC_TLS_KEY_FILE
  value: /etc/agentplane/tls/tls.key
{{- end }}
{{- if eq .Values.auth.mode "mtls" }}
- name: JANGAR_GRPC_TLS_CLIENT_CA_FILE
  value: /etc/agentplane/client-ca/{{ .Values.tls.clientCA.key }}
{{- end }}
{{- end }}

{{- define "agentplane-lib.serverVolumeMounts" }}
            {{- if .Values.tls.secretName }}
            - name: tls
              mountPath: /etc/agentplane/tls
              readOnly: true
            {{- end }}
            {{- if eq .Values.auth.mode "mtls" }}
            - name: client-ca
              mountPath: /etc/agentplane/client-ca
              readOnly: true
            {{- end }}
{{- end }}

{{- define "agentplane-lib.serverVolumes" }}
        {{- if .Values.tls.secretName }}
        - name: tls
          secret:
            secretName: {{ .Values.tls.secretName | quote }}
        {{- end }}
        {{- if eq .Values.auth.mode "mtls" }}
        {{- if not (and .Values.tls.secretName .Values.tls.clientCA.secretName) }}
        {{- fail "auth.mode=mtls needs tls.secretName (the server certificate) and tls.clientCA.secretName (the CA of client certificates)" }}
        {{- end }}
        - name: client-ca
          secret:
            secretName: {{ .Values.tls.clientCA.secretName | quote }}
        {{- end }}
{{- end }}

{{/*
auth.mode=token: who a caller's token belongs to. TokenReviews exist only at cluster scope, so
this is a ClusterRole; it grants nothing else.
*/}}
{{- define "agentplane-lib.tokenReviewerRBAC" -}}
{{- if eq .Values.auth.mode "token" }}
{{- $clusterName := include "agentplane-lib.clusterName" . }}
---
# auth.mode=token: who a caller's token belongs to. TokenReviews exist only at cluster scope, so
# this is a ClusterRole; it grants nothing else.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $clusterName }}-token-reviewer
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
rules:
  - apiGroups: ["authentication.k8s.io"]
    resources: ["tokenreviews"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $clusterName }}-token-reviewer
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $clusterName }}-token-reviewer
subjects:
  - kind: ServiceAccount
    name: {{ include "agentplane-lib.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
{{- end }}
