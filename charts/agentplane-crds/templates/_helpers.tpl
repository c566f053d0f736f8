{{/* [0, 1, ..., n-1] as a CEL list. */}}
{{- define "agentplane-crds.indices" -}}
[{{ range $i := until . }}{{ if $i }}, {{ end }}{{ $i }}{{ end }}]
{{- end }}

{{/* variables.<prefix>0, ..., variables.<prefix>(n-1), comma-separated: (list prefix n). */}}
{{- define "agentplane-crds.vars" -}}
{{- $p := index . 0 }}{{ range $i := until (index . 1) }}{{ if $i }}, {{ end }}variables.{{ $p }}{{ $i }}{{ end }}
{{- end }}
