{{/*
Redis, for the charts that use it (event-emitter, watch-gateway: those importing the library's
exports.redis). redisValues: the chart's redis.* when it names a Redis (url, sentinel or
cluster), else global.redis.* over the chart's defaults (the agentplane chart gives Redis once
there), as JSON.
*/}}
{{- define "agentplane-lib.redisValues" -}}
{{- $own := .Values.redis }}
{{- if or $own.url $own.sentinel.masterName $own.sentinel.addrs $own.cluster.addrs }}
{{- toJson $own }}
{{- else }}
{{- toJson (mergeOverwrite (deepCopy $own) (deepCopy ((.Values.global | default dict).redis | default dict))) }}
{{- end }}
{{- end }}

{{/*
Where Redis is (one node, Sentinel or Cluster), its credentials from Secrets, and TLS: the
JANGAR_REDIS_* variables libs/redisx reads.
*/}}
{{- define "agentplane-lib.redisEnv" -}}
{{- $r := include "agentplane-lib.redisValues" . | fromJson }}
{{- $modes := 0 }}
{{- if $r.url }}{{ $modes = add1 $modes }}{{ end }}
{{- if or $r.sentinel.masterName $r.sentinel.addrs }}{{ $modes = add1 $modes }}{{ end }}
{{- if $r.cluster.addrs }}{{ $modes = add1 $modes }}{{ end }}
{{- if gt $modes 1 }}
{{- fail "redis: set one of redis.url (one node), redis.sentinel (masterName and addrs) or redis.cluster.addrs, not several" }}
{{- end }}
{{- if and (or $r.sentinel.masterName $r.sentinel.addrs) (not (and $r.sentinel.masterName $r.sentinel.addrs)) }}
{{- fail "redis.sentinel needs both masterName and addrs" }}
{{- end }}
{{- with $r.url }}
- name: JANGAR_REDIS_URL
  value: {{ . | quote }}
{{- end }}
{{- if $r.sentinel.masterName }}
- name: JANGAR_REDIS_SENTINEL_MASTER
  value: {{ $r.sentinel.masterName | quote }}
- name: JANGAR_REDIS_SENTINEL_ADDRS
  value: {{ join "," $r.sentinel.addrs | quote }}
{{- end }}
{{- with $r.cluster.addrs }}
- name: JANGAR_REDIS_CLUSTER_ADDRS
  value: {{ join "," . | quote }}
{{- end }}
{{- if $r.db }}
- name: JANGAR_REDIS_DB
  value: {{ $r.db | int64 | quote }}
{{- end }}
{{- with $r.username }}
- name: JANGAR_REDIS_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- if $r.passwordSecretRef.name }}
- name: JANGAR_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $r.passwordSecretRef.name | quote }}
      key: {{ $r.passwordSecretRef.key | quote }}
{{- end }}
{{- if $r.sentinel.passwordSecretRef.name }}
- name: JANGAR_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $r.sentinel.passwordSecretRef.name | quote }}
      key: {{ $r.sentinel.passwordSecretRef.key | quote }}
{{- end }}
{{- if $r.tls.enabled }}
- name: JANGAR_REDIS_TLS
  value: "true"
{{- end }}
{{- if $r.tls.caSecretRef.name }}
- name: JANGAR_REDIS_TLS_CA_FILE
  value: {{ printf "/etc/agentplane/redis-ca/%s" $r.tls.caSecretRef.key | quote }}
{{- end }}
{{- with $r.tls.serverName }}
- name: JANGAR_REDIS_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "agentplane-lib.redisVolumeMounts" }}
            {{- $r := include "agentplane-lib.redisValues" . | fromJson }}
            {{- if $r.tls.caSecretRef.name }}
            - name: redis-ca
              mountPath: /etc/agentplane/redis-ca
              readOnly: true
            {{- end }}
{{- end }}

{{- define "agentplane-lib.redisVolumes" }}
        {{- $r := include "agentplane-lib.redisValues" . | fromJson }}
        {{- if $r.tls.caSecretRef.name }}
        - name: redis-ca
          secret:
            secretName: {{ $r.tls.caSecretRef.name | quote }}
            items:
              - key: {{ $r.tls.caSecretRef.key | quote }}
                path: {{ $r.tls.caSecretRef.key | quote }}
        {{- end }}
{{- end }}
