{{/*
The service's workload: ServiceAccount, Service, Deployment, NetworkPolicy, PodDisruptionBudget.
*/}}

{{- define "agentplane-lib.serviceaccount" -}}
{{- if .Values.serviceAccount.create }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "agentplane-lib.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
  {{- with .Values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: true
{{- end }}
{{- end }}

{{- define "agentplane-lib.service" -}}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "agentplane-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "agentplane-lib.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ include "agentplane-lib.grpcPort" . }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    - name: metrics
      port: {{ .Values.metrics.port | int }}
      targetPort: metrics
      protocol: TCP
    {{- if .Values.http }}
    - name: http
      port: {{ .Values.http.port | int }}
      targetPort: http
      protocol: TCP
    {{- end }}
    {{- if (.Values.apiService | default dict).enabled }}
    - name: apiservice
      port: {{ (.Values.apiService | default dict).port | default 8443 | int }}
      targetPort: apiservice
      protocol: TCP
    {{- end }}
{{- end }}

{{/*
The volumes the service mounts besides /tmp, and their mounts: those of its parts (client,
server, redis), then the chart's own (<chart>.volumeMounts, <chart>.volumes).
*/}}
{{- define "agentplane-lib.volumeMounts" }}
            {{- $parts := include "agentplane-lib.parts" . | fromJsonArray }}
            {{- if has "client" $parts }}{{ include "agentplane-lib.clientVolumeMounts" . }}{{ end }}
            {{- if has "server" $parts }}{{ include "agentplane-lib.serverVolumeMounts" . }}{{ end }}
            {{- if has "redis" $parts }}{{ include "agentplane-lib.redisVolumeMounts" . }}{{ end }}
            {{- include (printf "%s.volumeMounts" .Chart.Name) . }}
{{- end }}

{{- define "agentplane-lib.volumes" }}
        {{- $parts := include "agentplane-lib.parts" . | fromJsonArray }}
        {{- if has "client" $parts }}{{ include "agentplane-lib.clientVolumes" . }}{{ end }}
        {{- if has "server" $parts }}{{ include "agentplane-lib.serverVolumes" . }}{{ end }}
        {{- if has "redis" $parts }}{{ include "agentplane-lib.redisVolumes" . }}{{ end }}
        {{- include (printf "%s.volumes" .Chart.Name) . }}
{{- end }}

{{/*
topologySpreadConstraints, each given a labelSelector of the pods' own labels when it has none.
*/}}
{{- define "agentplane-lib.topologySpread" -}}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "agentplane-lib.selectorLabels" $ | fromYaml)) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- if $out }}{{ toYaml $out }}{{ end }}
{{- end }}

{{- define "agentplane-lib.deployment" -}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "agentplane-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicaCount | int }}
  selector:
    matchLabels:
      {{- include "agentplane-lib.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "agentplane-lib.labels" . | nindent 8 }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $tlsAnnotations := include "agentplane-lib.tlsPodAnnotations" . }}
      {{- if or .Values.podAnnotations $tlsAnnotations }}
      annotations:
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $tlsAnnotations }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "agentplane-lib.serviceAccountName" . }}
      automountServiceAccountToken: true
      terminationGracePeriodSeconds: 30
      {{- with include "agentplane-lib.imagePullSecrets" . }}
      imagePullSecrets:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with include "agentplane-lib.priorityClassName" . }}
      priorityClassName: {{ . | quote }}
      {{- end }}
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .Chart.Name }}
          image: {{ include "agentplane-lib.image" . | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          ports:
            - name: grpc
              containerPort: {{ include "agentplane-lib.grpcPort" . }}
              protocol: TCP
            - name: metrics
              containerPort: {{ .Values.metrics.port | int }}
              protocol: TCP
            {{- if .Values.http }}
            - name: http
              containerPort: {{ .Values.http.port | int }}
              protocol: TCP
            {{- end }}
            {{- if (.Values.apiService | default dict).enabled }}
            - name: apiservice
              containerPort: {{ (.Values.apiService | default dict).port | default 8443 | int }}
              protocol: TCP
            {{- end }}
          env:
            {{- include "agentplane-lib.containerEnv" . | nindent 12 }}
          {{- with .Values.livenessProbe }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .Values.readinessProbe }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- toYaml .Values.securityContext | nindent 12 }}
          {{- with .Values.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            # The root filesystem is read-only; os.TempDir() gets a scratch volume.
            - name: tmp
              mountPath: /tmp
            {{- include "agentplane-lib.volumeMounts" . }}
      volumes:
        - name: tmp
          emptyDir: {}
        {{- include "agentplane-lib.volumes" . }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with include "agentplane-lib.topologySpread" . }}
      topologySpreadConstraints:
        {{- . | nindent 8 }}
      {{- end }}
{{- end }}

{{- define "agentplane-lib.networkpolicy" -}}
{{- if .Values.networkPolicy.enabled }}
---
# Ingress to this service's pods: gRPC from networkPolicy.grpcFrom, metrics from
# networkPolicy.metricsFrom, nothing else. Egress is not restricted.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "agentplane-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "agentplane-lib.selectorLabels" . | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - ports:
        - port: grpc
          protocol: TCP
      {{- with .Values.networkPolicy.grpcFrom }}
      from:
        {{- toYaml . | nindent 8 }}
        {{- if $.Values.tests.enabled }}
        # `helm test`'s probe pod.
        - podSelector:
            matchLabels:
              app.kubernetes.io/instance: {{ $.Release.Name }}
              app.kubernetes.io/component: helm-test
        {{- end }}
      {{- end }}
    {{- if .Values.http }}
    {{- /* watch-gateway's SSE streams: the same peers as gRPC. */}}
    - ports:
        - port: http
          protocol: TCP
      {{- with .Values.networkPolicy.grpcFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- end }}
    {{- if (.Values.apiService | default dict).enabled }}
    {{- /* watch-gateway's aggregated API: the Kubernetes API server dials it from outside the pod
    network, and only its front-proxy client certificate is let through (checked by the gateway). */}}
    - ports:
        - port: apiservice
          protocol: TCP
    {{- end }}
    - ports:
        - port: metrics
          protocol: TCP
      {{- with .Values.networkPolicy.metricsFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
{{- end }}

{{- define "agentplane-lib.pdb" -}}
{{- if .Values.podDisruptionBudget.enabled }}
---
# Voluntary disruptions (node drains) leave at least minAvailable (or at most maxUnavailable)
# pods of this service running.
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "agentplane-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
spec:
  {{- if .Values.podDisruptionBudget.maxUnavailable }}
  maxUnavailable: {{ .Values.podDisruptionBudget.maxUnavailable }}
  {{- else }}
  minAvailable: {{ .Values.podDisruptionBudget.minAvailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "agentplane-lib.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}
