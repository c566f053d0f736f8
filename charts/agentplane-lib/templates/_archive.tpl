{{/*
The run archive's connection, from a service chart's archive.* values (job-gc writes the archive,
watch-gateway reads it): JANGAR_ARCHIVE_URL, with sslrootcert for archive.tls.caSecretRef's CA
(mounted at /etc/agentplane/archive-ca by agentplane-lib.archiveVolumeMounts) and, unless the URL
names one, sslmode=verify-full; JANGAR_ARCHIVE_PASSWORD from archive.passwordSecretRef; and
JANGAR_ARCHIVE_MAX_CONNS. Nothing when archive.enabled is false.
*/}}
{{- define "agentplane-lib.archiveEnv" -}}
{{- $a := .Values.archive }}
{{- if $a.enabled }}
{{- if not $a.url }}
{{- fail (printf "%s: archive.enabled needs archive.url (postgres://user@host:5432/database; the password from archive.passwordSecretRef)" .Chart.Name) }}
{{- end }}
{{- $url := $a.url }}
{{- if $a.tls.caSecretRef.name }}
{{- $sep := ternary "&" "?" (contains "?" $url) }}
{{- $url = printf "%s%ssslrootcert=/etc/agentplane/archive-ca/%s" $url $sep $a.tls.caSecretRef.key }}
{{- if not (regexMatch "[?&]sslmode=" $url) }}
{{- $url = printf "%s&sslmode=verify-full" $url }}
{{- end }}
{{- end }}
- name: JANGAR_ARCHIVE_URL
  value: {{ $url | quote }}
{{- if $a.passwordSecretRef.name }}
- name: JANGAR_ARCHIVE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $a.passwordSecretRef.name | quote }}
      key: {{ $a.passwordSecretRef.key | quote }}
{{- end }}
- name: JANGAR_ARCHIVE_MAX_CONNS
  value: {{ $a.maxConns | int | quote }}
{{- end }}
{{- end }}

{{/* The archive database's CA, when archive.tls.caSecretRef names one (its mount and volume). */}}
{{- define "agentplane-lib.archiveVolumeMounts" }}
            {{- if and .Values.archive.enabled .Values.archive.tls.caSecretRef.name }}
            - name: archive-ca
              mountPath: /etc/agentplane/archive-ca
              readOnly: true
            {{- end }}
{{- end }}
{{- define "agentplane-lib.archiveVolumes" }}
        {{- $ca := .Values.archive.tls.caSecretRef }}
        {{- if and .Values.archive.enabled $ca.name }}
        - name: archive-ca
          secret:
            secretName: {{ $ca.name | quote }}
            items:
              - key: {{ $ca.key | quote }}
                path: {{ $ca.key | quote }}
        {{- end }}
{{- end }}
