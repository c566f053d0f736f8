{{/* [0, 1, ..., n-1] as a CEL list. */}}
{{- define "agentplane-crds.indices" -}}
[{{ range $i := until . }}{{ if $i }}, {{ end }}{{ $i }}{{ end }}]
{{- end }}

{{/* variables.<prefix>0, ..., variables.<prefix>(n-1), comma-separated: (list prefix n). */}}
{{- define "agentplane-crds.vars" -}}
{{- $p := index . 0 }}{{ range $i := until (index . 1) }}{{ if $i }}, {{ end }}variables.{{ $p }}{{ $i }}{{ end }}
{{- end }}

{{/* Labels on the chart's objects. */}}
{{- define "agentplane-crds.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: agentplane-crds
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentplane
{{- end }}
