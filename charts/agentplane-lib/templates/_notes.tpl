{{/*
The parts of NOTES.txt every service chart prints: what runs where (notesHeader), and how to
check it (notesFooter). Each command in them is one an operator can paste.
*/}}
{{- define "agentplane-lib.notesHeader" -}}
{{ include "agentplane-lib.fullname" . }} ({{ include "agentplane-lib.image" . }}) runs in namespace {{ .Release.Namespace }}
and acts in: {{ include "agentplane-lib.namespaces" . | fromJsonArray | join ", " }}.

gRPC (with grpc.health.v1):
  {{ include "agentplane-lib.fullname" . }}.{{ .Release.Namespace }}.svc:{{ include "agentplane-lib.grpcPort" . }}

Health and metrics:
  kubectl -n {{ .Release.Namespace }} port-forward svc/{{ include "agentplane-lib.fullname" . }} {{ .Values.metrics.port | int }}:{{ .Values.metrics.port | int }}
  curl -s http://127.0.0.1:{{ .Values.metrics.port | int }}/readyz
  curl -s http://127.0.0.1:{{ .Values.metrics.port | int }}/metrics
{{- end }}

{{- define "agentplane-lib.notesFooter" -}}
{{- $a := .Values.auth | default dict }}
{{- if and .Values.tests.enabled (ne ($a.mode | default "") "none") }}

Check that it answers (a pod running its own `probe` against the gRPC health{{ if eq ($a.mode | default "") "mtls" }}; with mtls only when tests.clientSecretName is set{{ end }}):
  helm test {{ .Release.Name }} -n {{ .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
notesClient: how a controller reaches status-writer and event-emitter, and leader election.
*/}}
{{- define "agentplane-lib.notesClient" -}}
Leader election is {{ if .Values.leaderElection.enabled }}on: one replica acts at a time (Lease {{ include "agentplane-lib.leaseName" . }} in {{ .Release.Namespace }}{{ with include "agentplane-lib.legacyLease" . }}, and {{ . }} of earlier releases{{ end }}){{ else }}off: run a single replica{{ end }}.

It writes status through status-writer at {{ include "agentplane-lib.backendAddress" (dict "ctx" . "key" "statusWriter" "chart" "status-writer") }} and events through
event-emitter at {{ include "agentplane-lib.backendAddress" (dict "ctx" . "key" "eventEmitter" "chart" "event-emitter") }}.
{{ if .Values.serviceToken.enabled -}}
It identifies itself to them with a projected ServiceAccount token (audience {{ .Values.serviceToken.audience }}): its
ServiceAccount {{ include "agentplane-lib.serviceAccountName" . }} must be in their auth.allowedCallers.
{{- else if .Values.backendTLS.clientCertificate -}}
It identifies itself to them with the client certificate in Secret {{ .Values.backendTLS.secretName }}.
{{- else -}}
It presents no identity to them (serviceToken.enabled=false, no backendTLS client certificate):
status-writer and event-emitter refuse it unless they run with auth.mode=none.
{{- end }}
{{- end }}

{{/*
notesServer: who may call a server.
*/}}
{{- define "agentplane-lib.notesServer" -}}
Callers: {{ if eq .Values.auth.mode "token" }}a ServiceAccount token for audience {{ join ", " .Values.auth.audiences }} (TokenReview), from: {{ include "agentplane-lib.allowedCallers" . | fromJsonArray | join ", " }}{{ else if eq .Values.auth.mode "mtls" }}a client certificate signed by the CA in Secret {{ .Values.tls.clientCA.secretName }} whose CN is one of: {{ include "agentplane-lib.allowedCallers" . | fromJsonArray | join ", " }}{{ else }}not authenticated (auth.mode=none): gRPC listens on the pod's loopback only{{ end }}.
{{- if ne .Values.auth.mode "none" }}
Other callers get PERMISSION_DENIED naming the identity they presented; grpc.health.v1 stays open.
{{- end }}
{{- end }}
