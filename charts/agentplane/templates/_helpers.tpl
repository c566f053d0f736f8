{{/*
How this chart renders the services: each service chart is read through files/<service> (a link
to charts/<service>), and each of its templates is rendered with `tpl` against a context of its
own (.Values, .Chart, .Release, .Capabilities), the one `helm install <service>
charts/<service>` would give it, with these values:

  1. the chart's values.yaml;
  2. the top-level values the seeds name (controller, grpc, rbac, image, ...; see values.yaml),
     where the chart has the same value;
  3. the environment: env.vars, then controllers.env.vars or controlPlane.env.vars;
  4. the service's own block, which wins over all of the above;
  5. the wiring, unless the service's own block sets it: the controllers' statusWriter and
     eventEmitter addresses name this release's status-writer and event-emitter, and their
     auth.allowedCallers this release's controllers' ServiceAccounts.
*/}}

{{/*
runsNamespaces: the namespaces the services act on runs in, as a JSON list: controller.namespaces
when given; else, on an upgrade, the ones this release's run-controller already acts in (its
JANGAR_AGENTS_CONTROLLER_NAMESPACES), so runs in flight stay served; else runs.namespace, or
<release namespace>-runs.
*/}}
{{- define "agentplane.runsNamespaces" -}}
{{- $V := .Values }}
{{- if ($V.controller | default dict).namespaces }}
{{- $V.controller.namespaces | uniq | toJson }}
{{- else }}
{{- $current := "" }}
{{- if .Release.IsUpgrade }}
{{- range (lookup "apps/v1" "Deployment" .Release.Namespace "").items | default list }}
{{- if and (eq (dig "metadata" "labels" "app.kubernetes.io/instance" "" .) $.Release.Name) (eq (dig "metadata" "labels" "app.kubernetes.io/name" "" .) "run-controller") }}
{{- range (index .spec.template.spec.containers 0).env | default list }}
{{- if eq .name "JANGAR_AGENTS_CONTROLLER_NAMESPACES" }}{{ $current = .value | default "" }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if $current }}
{{- splitList "," $current | toJson }}
{{- else }}
{{- list (($V.runs | default dict).namespace | default (printf "%s-runs" .Release.Namespace)) | toJson }}
{{- end }}
{{- end }}
{{- end }}

{{/*
runsNamespace: the one namespace the chart creates for runs, or nothing (controller.namespaces
given, an upgrade that keeps the release's namespaces, or runs.createNamespace false).
*/}}
{{- define "agentplane.runsNamespace" -}}
{{- $ns := include "agentplane.runsNamespaces" . | fromJsonArray }}
{{- $fresh := list ((.Values.runs | default dict).namespace | default (printf "%s-runs" .Release.Namespace)) }}
{{- if and (.Values.runs | default dict).createNamespace (not (.Values.controller | default dict).namespaces) (eq (toJson $ns) (toJson $fresh)) (ne (first $ns) .Release.Namespace) }}
{{- first $ns }}
{{- end }}
{{- end }}

{{- define "agentplane.services" -}}
status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway
{{- end }}

{{/*
merge: (list DST SRC) sets every key of SRC into DST, merging maps key by key, recursively; any
other value of SRC (false, 0, "", lists, null included) replaces DST's.
*/}}
{{- define "agentplane.merge" -}}
{{- $dst := index . 0 }}
{{- range $k, $v := index . 1 }}
{{- if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) }}
{{- include "agentplane.merge" (list (get $dst $k) $v) }}
{{- else if kindIs "map" $v }}
{{- $_ := set $dst $k (deepCopy $v) }}
{{- else }}
{{- $_ := set $dst $k $v }}
{{- end }}
{{- end }}
{{- end }}

{{/*
contexts: (dict "root" $ "out" DICT) fills DICT with, for each enabled service, a dict of "ctx"
(the context its templates render with) and "lib" (its chart's named templates).
*/}}
{{- define "agentplane.contexts" -}}
{{- $root := .root }}
{{- $out := .out }}
{{- $V := $root.Values }}
{{- $controllers := list "job-gc" "cancel-propagator" "run-controller" }}
{{- range $svc := include "agentplane.services" . | splitList " " }}
{{- $own := deepCopy (index $V $svc | default dict) }}
{{- $enabled := $own.enabled }}
{{- $_ := unset $own "enabled" }}
{{- if and (has $svc $controllers) (not $V.controllers.enabled) }}{{ $enabled = false }}{{ end }}
{{- if $enabled }}
{{- $base := printf "files/%s" $svc }}
{{- $meta := $root.Files.Get (printf "%s/Chart.yaml" $base) | fromYaml }}
{{- $vals := $root.Files.Get (printf "%s/values.yaml" $base) | fromYaml }}
{{- if not (and $meta.name $vals) }}
{{- fail (printf "%s/Chart.yaml or values.yaml is missing or empty: %s must be a link to the %s chart (charts/%s)" $base $base $svc $svc) }}
{{- end }}
{{- /* 2. the seeds' top-level values, where this chart has the same value */}}
{{- $top := dict }}
{{- range $k := list "controller" "grpc" "rbac" "image" "imagePullSecrets" "logLevel" "logFormat" "otel" "redis" "orchestrationController" "supportingController" }}
{{- if and (hasKey $V $k) (hasKey $vals $k) }}
{{- $v := index $V $k }}
{{- if and (kindIs "map" $v) (kindIs "map" (index $vals $k)) }}
{{- $picked := dict }}
{{- range $sk, $sv := $v }}
{{- /* the seeds' keys a chart refuses with a message reach it whole (grpc.enabled, ...) */}}
{{- if or (hasKey (index $vals $k) $sk) (has $k (list "grpc" "orchestrationController" "supportingController")) }}{{ $_ := set $picked $sk $sv }}{{ end }}
{{- end }}
{{- $_ := set $top $k $picked }}
{{- else }}
{{- $_ := set $top $k $v }}
{{- end }}
{{- end }}
{{- end }}
{{- include "agentplane.merge" (list $vals $top) }}
{{- /* where the runs are (runs.*), for every chart that acts on them */}}
{{- if and (kindIs "map" $vals.controller) (hasKey $vals.controller "namespaces") }}
{{- $_ := set $vals.controller "namespaces" (include "agentplane.runsNamespaces" $root | fromJsonArray) }}
{{- end }}
{{- /* 3. the environment */}}
{{- $vars := deepCopy ($V.env.vars | default dict) }}
{{- $side := ternary $V.controlPlane.env.vars $V.controllers.env.vars (eq $svc "watch-gateway") }}
{{- $vars = mergeOverwrite $vars (deepCopy ($side | default dict)) }}
{{- include "agentplane.merge" (list $vals (dict "env" (dict "vars" $vars))) }}
{{- /* 4. the service's own block */}}
{{- include "agentplane.merge" (list $vals $own) }}
{{- /* the chart's definitions: every templates/_*.tpl (_common, _helpers, _redis where used) */}}
{{- $lib := "" }}
{{- range $p, $_ := $root.Files.Glob (printf "%s/templates/_*.tpl" $base) }}
{{- $lib = print $lib ($root.Files.Get $p) }}
{{- end }}
{{- $ctx := dict "Values" $vals "Release" $root.Release "Capabilities" $root.Capabilities "Template" $root.Template
      "Chart" (dict "Name" $meta.name "Version" $meta.version "AppVersion" $meta.appVersion) }}
{{- $_ := set $out $svc (dict "ctx" $ctx "lib" $lib "own" $own) }}
{{- end }}
{{- end }}
{{- /* 5. the wiring, where the service's own block does not set it */}}
{{- $callers := list }}
{{- range $svc := $controllers }}
{{- with index $out $svc }}
{{- $callers = append $callers (include "agentplane.call" (list . "serviceAccountName")) }}
{{- end }}
{{- end }}
{{- range $svc, $s := $out }}
{{- $vals := $s.ctx.Values }}
{{- range $key, $target := dict "statusWriter" "status-writer" "eventEmitter" "event-emitter" }}
{{- if and (hasKey $vals $key) (hasKey $out $target) (not (dig $key "address" "" $s.own)) }}
{{- $t := index $out $target }}
{{- $addr := printf "%s:%d" (include "agentplane.call" (list $t "fullname")) ($t.ctx.Values.grpc.port | int) }}
{{- $_ := set (index $vals $key) "address" $addr }}
{{- end }}
{{- end }}
{{- if and (has $svc (list "status-writer" "event-emitter")) $callers (not (dig "auth" "allowedCallers" nil $s.own)) }}
{{- $_ := set $vals.auth "allowedCallers" $callers }}
{{- end }}
{{- /* the job-result finalizer only where job-gc, which releases it, is installed */}}
{{- if and (eq $svc "run-controller") (not (kindIs "bool" (dig "controller" "jobResultFinalizer" nil $s.own))) }}
{{- $_ := set $vals.controller "jobResultFinalizer" (hasKey $out "job-gc") }}
{{- end }}
{{- end }}
{{- end }}

{{/*
call: (list SERVICE NAME) renders the service chart's named template "<service>.NAME" in the
service's context.
*/}}
{{- define "agentplane.call" -}}
{{- $s := index . 0 }}
{{- tpl (print $s.lib (printf "{{- include %q . -}}" (printf "%s.%s" $s.ctx.Chart.Name (index . 1)))) $s.ctx | trim }}
{{- end }}
