{{/*
The helm test pod and the objects every service chart renders (agentplane-lib.objects).
*/}}

{{- define "agentplane-lib.test" -}}
{{- /*
`helm test <release>`: a pod that runs this service's own image with its `probe` subcommand against
the Service's gRPC health (grpc.health.v1, which no caller check guards). With TLS (tls.secretName,
or the chart's own certificate) it verifies the server with that Secret's CA (tests.caKey) and the
Service's DNS name; with auth.mode=mtls it presents tests.clientSecretName's certificate (no test
without one). A server that listens on loopback only (auth.mode=none) cannot be reached from
another pod, so there is no test then.
*/}}
{{- $auth := .Values.auth | default dict }}
{{- $tlsSecret := include "agentplane-lib.tlsSecretName" . }}
{{- $mtlsWithoutClient := and (eq ($auth.mode | default "") "mtls") (not .Values.tests.clientSecretName) }}
{{- if and .Values.tests.enabled (ne ($auth.mode | default "") "none") (not $mtlsWithoutClient) }}
{{- $fullname := include "agentplane-lib.fullname" . }}
{{- $host := printf "%s.%s.svc" $fullname .Release.Namespace }}
---
apiVersion: v1
kind: Pod
metadata:
  name: {{ $fullname }}-test-health
  namespace: {{ .Release.Namespace }}
  labels:
    helm.sh/chart: {{ include "agentplane-lib.chart" . }}
    app.kubernetes.io/name: {{ include "agentplane-lib.name" . }}-test
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/component: helm-test
    app.kubernetes.io/managed-by: {{ .Release.Service }}
    app.kubernetes.io/part-of: agentplane
    {{- with .Values.commonLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    "helm.sh/hook": test
    "helm.sh/hook-delete-policy": before-hook-creation,hook-succeeded
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  {{- with include "agentplane-lib.imagePullSecrets" . }}
  imagePullSecrets:
    {{- . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: probe
      image: {{ include "agentplane-lib.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - probe
        {{- if $tlsSecret }}
        - --ca-file=/etc/agentplane/tls/{{ .Values.tests.caKey }}
        - --server-name={{ $host }}
        {{- if eq $auth.mode "mtls" }}
        - --cert-file=/etc/agentplane/client/tls.crt
        - --key-file=/etc/agentplane/client/tls.key
        {{- end }}
        {{- end }}
        - {{ printf "%s:%d" $host (include "agentplane-lib.grpcPort" . | int) }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      resources:
        requests: {cpu: 10m, memory: 16Mi}
        limits: {memory: 64Mi}
      {{- if $tlsSecret }}
      volumeMounts:
        - name: tls
          mountPath: /etc/agentplane/tls
          readOnly: true
        {{- if eq $auth.mode "mtls" }}
        - name: client
          mountPath: /etc/agentplane/client
          readOnly: true
        {{- end }}
      {{- end }}
  {{- if $tlsSecret }}
  volumes:
    - name: tls
      secret:
        secretName: {{ $tlsSecret | quote }}
        items:
          - key: {{ .Values.tests.caKey | quote }}
            path: {{ .Values.tests.caKey | quote }}
    {{- if eq $auth.mode "mtls" }}
    - name: client
      secret:
        secretName: {{ .Values.tests.clientSecretName | quote }}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
objects: what every service chart renders (its templates/agentplane.yaml includes it): the
ServiceAccount, the RBAC of its rules (agentplane-lib.rbac; a chart whose .Values.rbac shape is its
own passes (dict "ctx" . "except" (list "rbac")) and renders its own with the shapes in
_rbac.tpl), the Service, the Deployment, the NetworkPolicy, the PodDisruptionBudget, the
ServiceMonitor, the PrometheusRule and the dashboard. Called with . or (dict "ctx" . "except" LIST).
*/}}
{{- define "agentplane-lib.objects" -}}
{{- $c := . }}
{{- $except := list }}
{{- if hasKey . "ctx" }}{{ $c = .ctx }}{{ $except = .except | default list }}{{ end }}
{{- range list "serviceaccount" "rbac" "service" "deployment" "networkpolicy" "pdb" "servicemonitor" "prometheusrule" "dashboard" }}
{{- if not (has . $except) }}
{{ include (printf "agentplane-lib.%s" .) $c }}
{{- end }}
{{- end }}
{{- end }}
