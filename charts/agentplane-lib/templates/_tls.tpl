{{/*
The Secret holding the server's certificate (tls.crt, tls.key, and ca.crt for helm test), or
nothing when the service serves plaintext: tls.secretName, else <fullname>-tls when the chart
makes it (tls.certManager.issuerRef.name: a cert-manager Certificate; tls.generate: Helm makes a
CA and a certificate at install). Only watch-gateway's values have the last two.
*/}}
{{- define "agentplane-lib.tlsSecretName" -}}
{{- $tls := .Values.tls | default dict -}}
{{- if $tls.secretName -}}
{{- $tls.secretName -}}
{{- else if or (dig "certManager" "issuerRef" "name" "" $tls) $tls.generate -}}
{{- include "agentplane-lib.fullname" . }}-tls
{{- end -}}
{{- end }}

{{/*
The ConfigMap holding the CA clients verify the server with: tls.caConfigMap.name, else
<fullname>-ca when the chart generates the certificate; nothing otherwise. agentctl finds it through
the pod's agentplane.dev/tls-ca-configmap annotation and reads it with the user's kubeconfig.
*/}}
{{- define "agentplane-lib.caConfigMap" -}}
{{- $tls := .Values.tls | default dict -}}
{{- if dig "caConfigMap" "name" "" $tls -}}
{{- dig "caConfigMap" "name" "" $tls -}}
{{- else if and (not $tls.secretName) (not (dig "certManager" "issuerRef" "name" "" $tls)) $tls.generate -}}
{{- include "agentplane-lib.fullname" . }}-ca
{{- end -}}
{{- end }}

{{/*
The pod annotations that tell a client (agentctl, through a port-forward) how to verify the
server: the name in its certificate and where its CA is.
*/}}
{{- define "agentplane-lib.tlsPodAnnotations" -}}
{{- if include "agentplane-lib.tlsSecretName" . }}
agentplane.dev/tls-server-name: {{ printf "%s.%s.svc" (include "agentplane-lib.fullname" .) .Release.Namespace | quote }}
{{- with include "agentplane-lib.caConfigMap" . }}
agentplane.dev/tls-ca-configmap: {{ . | quote }}
agentplane.dev/tls-ca-key: {{ dig "caConfigMap" "key" "ca.crt" ($.Values.tls | default dict) | quote }}
{{- end }}
{{- end }}
{{- end }}
