{{/*
The controllers' side (job-gc, cancel-propagator, run-controller: charts whose <chart>.parts says
"client"): how they reach status-writer and event-emitter, how they identify themselves to them,
and leader election.
*/}}

{{/*
The address of status-writer or event-emitter ((dict "ctx" . "key" "statusWriter"|"eventEmitter"
"chart" "status-writer"|"event-emitter")): <key>.address; when that is empty, in the agentplane
chart (which leaves it empty), this release's Service of that chart (<release>-<chart>:<grpc
port>).
*/}}
{{- define "agentplane-lib.backendAddress" -}}
{{- $c := .ctx }}
{{- $given := (index $c.Values .key | default dict).address | default "" }}
{{- if $given }}
{{- $given }}
{{- else if include "agentplane-lib.inUmbrella" $c }}
{{- printf "%s:%d" (include "agentplane-lib.fullnameOf" (dict "release" $c.Release.Name "chart" .chart)) (include "agentplane-lib.global" (list $c "grpc" "port") | default 50051 | int) }}
{{- else }}
{{- fail (printf "%s: %s.address is empty: set it to %s's host:port (its Service)" $c.Chart.Name .key .chart) }}
{{- end }}
{{- end }}

{{/*
The name of the Lease leader election holds: leaderElection.leaseName, else the release's own
(<fullname>), so that two releases of a chart never share one. The Lease of earlier releases
(agentplane-<chart>) is held as well while it differs (agentplane-lib.legacyLease): pods of an
earlier release, which know only that one, and pods of this one never lead at once.
*/}}
{{- define "agentplane-lib.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (include "agentplane-lib.fullname" .) }}
{{- end }}

{{- define "agentplane-lib.legacyLease" -}}
{{- $legacy := printf "agentplane-%s" .Chart.Name }}
{{- if and .Values.leaderElection.holdLegacyLease (ne $legacy (include "agentplane-lib.leaseName" .)) }}{{ $legacy }}{{ end }}
{{- end }}

{{/*
A duration value (the schema's pattern: numbers with ms, s, m or h, as in "1m30s") in milliseconds.
*/}}
{{- define "agentplane-lib.durationMs" -}}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ms|s|m|h)" . -1 }}
{{- $unit := regexFind "(ms|s|m|h)$" . }}
{{- $total = addf $total (mulf (trimSuffix $unit . | float64) (get (dict "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0) $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{- define "agentplane-lib.clientEnv" -}}
{{- if .Values.serviceToken.enabled }}
- name: JANGAR_SERVICE_TOKEN_FILE
  value: /var/run/secrets/agentplane/token/token
{{- end }}
{{- if .Values.backendTLS.secretName }}
- name: JANGAR_GRPC_CLIENT_CA_FILE
  value: /etc/agentplane/backend-tls/ca.crt
{{- if .Values.backendTLS.clientCertificate }}
- name: JANGAR_GRPC_CLIENT_CERT_FILE
  value: /etc/agentplane/backend-tls/tls.crt
- name: JANGAR_GRPC_CLIENT_KEY_FILE
  value: /etc/agentplane/backend-tls/tls.key
{{- end }}
{{- with .Values.backendTLS.serverName }}
- name: JANGAR_GRPC_CLIENT_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- $le := .Values.leaderElection }}
{{- if $le.enabled }}
{{- $lease := include "agentplane-lib.durationMs" $le.leaseDuration | float64 }}
{{- $renew := include "agentplane-lib.durationMs" $le.renewDeadline | float64 }}
{{- $retry := include "agentplane-lib.durationMs" $le.retryPeriod | float64 }}
{{- if not (and (gt $lease $renew) (gt $renew $retry) (gt $retry 0.0)) }}
{{- fail (printf "%s: leaderElection needs leaseDuration > renewDeadline > retryPeriod > 0 (got %s, %s, %s); the service refuses anything else" .Chart.Name $le.leaseDuration $le.renewDeadline $le.retryPeriod) }}
{{- end }}
{{- end }}
- name: JANGAR_LEADER_ELECTION_ENABLED
  value: {{ $le.enabled | quote }}
- name: JANGAR_LEADER_ELECTION_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: JANGAR_LEADER_ELECTION_LEASE_NAME
  value: {{ include "agentplane-lib.leaseName" . | quote }}
{{- with include "agentplane-lib.legacyLease" . }}
- name: JANGAR_LEADER_ELECTION_LEGACY_LEASE_NAME
  value: {{ . | quote }}
{{- end }}
- name: JANGAR_LEADER_ELECTION_LEASE_DURATION
  value: {{ $le.leaseDuration | quote }}
- name: JANGAR_LEADER_ELECTION_RENEW_DEADLINE
  value: {{ $le.renewDeadline | quote }}
- name: JANGAR_LEADER_ELECTION_RETRY_PERIOD
  value: {{ $le.retryPeriod | quote }}
- name: JANGAR_STATUS_WRITER_ADDR
  value: {{ include "agentplane-lib.backendAddress" (dict "ctx" . "key" "statusWriter" "chart" "status-writer") | quote }}
- name: JANGAR_EVENT_EMITTER_ADDR
  value: {{ include "agentplane-lib.backendAddress" (dict "ctx" . "key" "eventEmitter" "chart" "event-emitter") | quote }}
{{- end }}

{{- define "agentplane-lib.clientVolumeMounts" }}
            {{- if .Values.serviceToken.enabled }}
            - name: service-token
              mountPath: /var/run/secrets/agentplane/token
              readOnly: true
            {{- end }}
            {{- if .Values.backendTLS.secretName }}
            - name: backend-tls
              mountPath: /etc/agentplane/backend-tls
              readOnly: true
            {{- end }}
{{- end }}

{{- define "agentplane-lib.clientVolumes" }}
        {{- if .Values.serviceToken.enabled }}
        # A token for status-writer and event-emitter only (its audience), rotated by kubelet.
        - name: service-token
          projected:
            sources:
              - serviceAccountToken:
                  path: token
                  audience: {{ .Values.serviceToken.audience | quote }}
                  expirationSeconds: {{ .Values.serviceToken.expirationSeconds | int }}
        {{- end }}
        {{- if .Values.backendTLS.secretName }}
        - name: backend-tls
          secret:
            secretName: {{ .Values.backendTLS.secretName | quote }}
        {{- end }}
{{- end }}

{{/*
Leader election's RBAC: create Leases (create cannot be limited to a name), get and update the
ones it holds (agentplane-lib.leaseName, and the earlier releases' while it holds that too).
*/}}
{{- define "agentplane-lib.leaderElectionRBAC" -}}
{{- if .Values.leaderElection.enabled }}
{{- $fullname := include "agentplane-lib.fullname" . }}
{{- $leases := list (include "agentplane-lib.leaseName" .) }}
{{- with include "agentplane-lib.legacyLease" . }}{{ $leases = append $leases . }}{{ end }}
---
# Leader election: client-go keeps the lock in a Lease in the release namespace.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}-leader-election
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
rules:
  # create cannot be limited to a name; reading and renewing can (the Leases it holds).
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: {{ toJson $leases }}
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}-leader-election
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentplane-lib.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ include "agentplane-lib.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
{{- end }}
